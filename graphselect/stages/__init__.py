"""The stages of :func:`graphselect.optimize` (DESIGN.md, "Data flow"), one module each, in the
order they run; each returns a frozen record that the later stages read, and a stage imports
only the stages before it:

``settings`` (Settings: every option validated) -> ``load`` (Imported: the model as a LayerGraph)
-> ``measure`` (Measured: every candidate timed, the record store) -> ``machine`` (Machine: this
CPU's caches) -> ``build`` (Built: one assignment rewritten and compiled) -> ``select`` (Selection:
the closed loop of solve, build, time in place, calibrate) -> ``check`` (Checked: every output
against the reference, end-to-end timing). ``api.optimize`` only composes them.
"""
