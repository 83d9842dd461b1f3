"""File jobs on the server's side (`transformer_en_de/app/files.py`): the one time a job asks the scheduler for room;
and jobs that fail: a full disk, before the job or during it, and an error whose text names a server path. The
visitor gets one plain line (no path, no errno), the log one line, and no empty or half-written TSV is left for Gradio
to serve."""

import errno
import shutil
import subprocess

import pytest

from transformer_en_de.app import files, translators
from transformer_en_de.app.serving.scheduler import FairScheduler
from transformer_en_de.app.translation import RequestContext

LINES = "A dog runs in the park.\nTwo men are working.\n\nThe cat sleeps on the sofa.\nThree people ride bicycles.\n"


@pytest.fixture(scope="module")
def ours(app_model_dir):
    return translators.load_our_translator(str(app_model_dir))


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "upload" / "source.en"
    path.parent.mkdir()
    path.write_text(LINES, encoding="utf-8")
    return path


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of 256 kB (a tmpfs), where this test may mount one (root on Linux); skipped elsewhere."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    mount = shutil.which("mount")
    mounted = mount and subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], check=False, capture_output=True
    )
    if not mounted or mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root (mount -t tmpfs)")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def fill(folder) -> None:
    """Write into `folder` until its disk is full."""
    with open(folder / "filler", "ab", buffering=0) as handle:  # unbuffered: nothing left to write at close
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == errno.ENOSPC
    assert shutil.disk_usage(folder).free == 0


def left_behind(folder) -> list[str]:
    """Every file under `folder` but the filler."""
    found = [path for path in folder.rglob("*") if path.is_file() and path.name != "filler"]
    return sorted(str(path.relative_to(folder)) for path in found)


class RoomCountingScheduler(FairScheduler):
    """The app's scheduler, counting the times it is asked for room (`check_room`, before a job or by the job)."""

    def __init__(self, **options):
        super().__init__(**options)
        self.room_asked = 0

    def check_room(self, work: float) -> None:
        self.room_asked += 1
        super().check_room(work)


def test_a_file_job_asks_the_scheduler_for_room_once(ours, source, tmp_path):
    """Before its lines are checked or tokenized (`RequestPlan.admit`); its plan (`RequestPlan.fit`) does not
    ask again. A full server refuses it at that one question."""
    scheduler = RoomCountingScheduler()
    result = files.translate_file(
        source,
        None,
        "beam search",
        2,
        8,
        context=RequestContext(ours, scheduler=scheduler),
        output_dir=tmp_path / "cache",
    )
    assert result.path and scheduler.room_asked == 1  # the job is ordinary: its own admission asks nothing

    full = RoomCountingScheduler(heavy_jobs=0, ordinary_seconds=0.0)  # every request is heavy, none may run
    refused = files.translate_file(
        source, None, "beam search", 2, 8, context=RequestContext(ours, scheduler=full), output_dir=tmp_path / "cache"
    )
    assert refused.path is None and "as many long requests as it can" in refused.summary and full.room_asked == 1


def logged(capfd) -> list[str]:
    out, err = capfd.readouterr()
    return [line for line in (out + err).splitlines() if line.strip()]


def test_a_full_disk_refuses_the_job_in_one_plain_line_before_anything_is_translated(ours, source, small_disk, capfd):
    fill(small_disk)
    steps = []
    logged(capfd)

    result = files.translate_file(
        source,
        None,
        "greedy",
        1,
        8,
        context=RequestContext(ours),
        output_dir=small_disk,
        progress=lambda *step, **_: steps.append(step),
    )

    assert result.path is None and result.summary == f"⚠️ {files.NO_ROOM}"
    assert steps == [] and left_behind(small_disk) == []
    lines = logged(capfd)
    assert len(lines) == 1 and "No space left on device" in lines[0], lines  # the detail, once, for the operator


def test_a_disk_that_fills_during_the_job_leaves_no_half_written_tsv(ours, source, small_disk, capfd):
    steps = []

    def progress(*step, **_):
        if not steps:
            fill(small_disk)  # another tenant of the disk takes its last bytes while the lines are translated
        steps.append(step)

    logged(capfd)
    result = files.translate_file(
        source, None, "greedy", 1, 8, context=RequestContext(ours), output_dir=small_disk, progress=progress
    )

    assert steps  # translated, then the TSV could not be written
    assert result.path is None and result.summary == f"⚠️ {files.NO_ROOM}"
    assert left_behind(small_disk) == [] and list((small_disk / "translations").iterdir()) == []
    lines = logged(capfd)
    assert len(lines) == 1 and "Traceback" not in lines[0], lines


def test_a_job_that_fails_with_a_server_path_in_its_error_names_no_path(ours, source, tmp_path, capfd, monkeypatch):
    inside = "/srv/app/.venv/lib/python3.11/site-packages/torch/_ops.py"

    def fails(*args, **kwargs):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", inside)

    monkeypatch.setattr(files, "run_systems", fails)
    logged(capfd)
    result = files.translate_file(
        source, None, "greedy", 1, 8, context=RequestContext(ours), output_dir=tmp_path / "cache"
    )

    assert result.path is None and result.summary == f"⚠️ {files.FAILED}" and "/" not in result.summary
    assert left_behind(tmp_path / "cache") == []
    lines = logged(capfd)
    assert len(lines) == 1 and inside in lines[0], lines  # the operator's log has the detail, once


@pytest.mark.parametrize(("code", "expected"), [(errno.ENOSPC, files.NO_ROOM), (errno.EACCES, files.CANNOT_STORE)])
def test_a_storage_error_with_a_path_is_a_line_without_it(code, expected, capfd):
    error = OSError(code, "whatever the system says", "/srv/app/.venv/gradio/translations/0a1b/source.de.tsv")

    assert files.storage_problem(error) == expected and "/" not in expected


def test_a_job_stopped_while_translating_leaves_nothing(ours, tmp_path):
    """A server stopped mid-job (SIGTERM): the TSV is written only once every line is translated, so nothing, not
    even an empty file, is on disk while the job runs, or after it stops."""
    seen = []

    def progress(*step, **_):
        seen.append(left_behind(tmp_path / "cache"))
        raise SystemExit  # the server stopping

    (tmp_path / "source.en").write_text(LINES, encoding="utf-8")
    with pytest.raises(SystemExit):
        files.translate_file(
            tmp_path / "source.en",
            None,
            "greedy",
            1,
            8,
            context=RequestContext(ours),
            output_dir=tmp_path / "cache",
            progress=progress,
        )

    assert seen == [[]] and left_behind(tmp_path / "cache") == []


def test_a_stop_while_the_tsv_is_written_leaves_no_partial_file(tmp_path, monkeypatch):
    def stopped(handle, *args):
        handle.write("line\tsource\n")
        raise SystemExit  # the server stopping in the middle of the rows

    monkeypatch.setattr(files, "write_rows", stopped)
    with pytest.raises(SystemExit):
        files.write_tsv(tmp_path, "source", ["A dog."], {"ours": ["Ein Hund."]}, None)

    assert list(tmp_path.rglob("*")) == []
