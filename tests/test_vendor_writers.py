"""Writers of one vendor directory (``oracle record``, ``oracle import-reference``): concurrent writers lose no
listing, the manifest is never a record file's name, and an invalid manifest refuses the write up front.

Found by the hostile sweep (``scripts/hostile_sweep.py``): ``import-reference --output MANIFEST.json`` wrote a
record file over the manifest and then crashed (``internal error ValidationError``), leaving every vendored record
unverifiable; a later ``oracle record`` into that directory crashed the same way after running Calculon; and two
writers at once each read the manifest, wrote their file and rewrote the manifest from what they had read, so the
second dropped the first's listing (1 round in 10 of two concurrent ``import-reference`` runs on main).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, vendored_reference
from conftest import one_error_line, run_cli as run  # one error line, exit 2, no traceback

VENDOR = ROOT / "vendor" / "calculon-0.1.0"

#: A writer whose manifest update is slowed down: every SHA-256 of the record module sleeps first, so that two
#: writers started together are both between reading and rewriting the manifest unless they are serialised.
#: (Only the timing is changed; what is asserted is the manifest the real commands leave.)
SLOW_WRITER = """
import sys, time
import harness.oracles.record as record
write = record.write_json  # slowed inside the vendor lock: the two writers overlap unless the lock holds
record.write_json = lambda path, data: (time.sleep(1.0), write(path, data))[1]
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


def digests(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def manifest_problems(vendor: Path) -> list[str]:
    """Listed files that are missing or whose SHA-256 differs from the manifest's."""
    listed = json.loads((vendor / "MANIFEST.json").read_text())["files"]
    problems = []
    for relative, digest in listed.items():
        path = vendor / relative
        if not path.is_file():
            problems.append(f"{relative}: missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(f"{relative}: digest differs")
    return problems


@pytest.fixture
def reference(tmp_path) -> Path:
    """The first three vendored Table 5 records in the shared format (recorded with the manifest's Calculon)."""
    data = vendored_reference(3)
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def vendor(tmp_path) -> Path:
    """A copy of the project's vendored records."""
    copy = tmp_path / "vendor"
    shutil.copytree(VENDOR, copy)
    return copy


def test_two_concurrent_writers_both_stay_listed(reference, vendor, tmp_path):
    before = json.loads((vendor / "MANIFEST.json").read_text())["files"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("HARNESS_DEBUG", None)
    writers = [subprocess.Popen([sys.executable, "-c", SLOW_WRITER, "oracle", "import-reference", str(reference),
                                 "--output", f"records/writer{i}.json", "--vendor", str(vendor)],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(2)]
    results = [(w.wait(timeout=120), w.stderr.read()) for w in writers]
    for w in writers:
        w.stdout.close()
        w.stderr.close()
    for status, err in results:
        assert "Traceback" not in err and "internal error" not in err, err
        assert status == 0, err
    listed = json.loads((vendor / "MANIFEST.json").read_text())["files"]
    assert set(listed) == set(before) | {"records/writer0.json", "records/writer1.json"}
    assert manifest_problems(vendor) == []
    assert not [p for p in vendor.rglob(".*.tmp")], "temporary file left in the vendor directory"


@pytest.mark.parametrize("output", ["MANIFEST.json", "PROVENANCE.md", "MANIFEST.json/x.json"])
def test_import_reference_refuses_the_manifest_as_output(reference, vendor, capsys, output):
    before = digests(vendor)
    one_error_line(*run(capsys, "oracle", "import-reference", reference, "--output", output, "--vendor", vendor)[::2],
                   f"{output}: --output: ")
    assert digests(vendor) == before


def test_record_refuses_the_manifest_as_output_before_calculon(vendor, capsys, tmp_path):
    before = digests(vendor)
    one_error_line(*run(capsys, "oracle", "record", "--calculon-src", tmp_path / "nonexistent", "--output",
                        "MANIFEST.json", "--vendor", vendor)[::2], "MANIFEST.json: --output: ")
    assert digests(vendor) == before


def test_an_invalid_manifest_refuses_record_before_calculon_runs(vendor, capsys, tmp_path):
    """A manifest that is a record file: ``oracle record`` used to run Calculon, write its record file, then crash
    on the manifest (internal error) leaving the new file unlisted. Now it is refused first: the error names the
    manifest (not the missing Calculon checkout, which would only be looked at afterwards)."""
    shutil.copy(vendor / "records" / "cases.json", vendor / "MANIFEST.json")
    before = digests(vendor)
    one_error_line(*run(capsys, "oracle", "record", "--calculon-src", tmp_path / "nonexistent", "--output",
                        "records/new.json", "--vendor", vendor)[::2], vendor / "MANIFEST.json", "not a valid manifest")
    assert digests(vendor) == before


def test_an_invalid_manifest_refuses_import_reference(reference, vendor, capsys):
    shutil.copy(vendor / "records" / "cases.json", vendor / "MANIFEST.json")
    before = digests(vendor)
    one_error_line(*run(capsys, "oracle", "import-reference", reference, "--output", "records/new.json", "--vendor",
                        vendor)[::2], vendor / "MANIFEST.json")
    assert digests(vendor) == before
