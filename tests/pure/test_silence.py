"""Exports silence the process's stderr (TVM's per-function warnings) while they run, several at
once; the CLI's progress keeps showing meanwhile."""
import os
import threading

from graphselect.cli import _Progress
from graphselect.stages.build import silence_stderr


def _stderr_to(path):
    """Point fd 2 at ``path``; returns the saved descriptor."""
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


def test_overlapping_silences_keep_stderr_quiet_until_the_last_ends_and_progress_shows(tmp_path):
    log = tmp_path / "stderr.txt"
    saved = _stderr_to(log)
    try:
        with open(2, "w", closefd=False) as err:
            progress = _Progress(err)
            inside, leave = threading.Event(), threading.Event()

            def export():
                with silence_stderr():
                    inside.set()
                    leave.wait(10)
            t = threading.Thread(target=export)
            with silence_stderr():
                t.start()
                assert inside.wait(10)
                os.write(2, b"lost 1\n")
            os.write(2, b"lost 2\n")          # the other thread is still inside
            progress("build", 1, 2, "shown while silenced")
            leave.set()
            t.join(10)
            os.write(2, b"back\n")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    text = log.read_text()
    assert "lost" not in text
    assert "shown while silenced" in text and text.rstrip().endswith("back")
