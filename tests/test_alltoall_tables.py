"""nccl-tests ``alltoall_perf`` tables as ``all_to_all`` sweeps and curves (issue 21 item 4), with the hostile
inputs of ``tests/test_hostile_measurements.py``'s style: every bad table is one error line naming the file and
the field, and nothing is written.

The good table's line is nccl-tests' own output of ``alltoall_perf`` on 4 GB300 ranks (a public run): 8 GiB sent
per rank, 536870912 floats to each of the 4 ranks, 10308 us out-of-place, 9568.2 us in-place.
"""

from __future__ import annotations

import json

import pytest

from harness.errors import InputError
from harness.evidence.profile import VOLUME_FALLBACK, load_profile
from harness.measurements.nccl_tests import parse_nccl_tests, sweep_curve, with_sweeps
from harness.vocabulary import COLLECTIVES

from conftest import one_error_line, run_cli as run

STARTING = "# Collective test starting: alltoall_perf\n"
HEADER = ("# nThread 1 nGpus 1 minBytes 524288 maxBytes 17179869184 step: 2(factor) warmup iters: 1 iters: 50\n"
          "#  Rank  0 Group  0 Pid 568623 on   GPU-3882 device  0 [0008:06:00] NVIDIA GB300\n"
          "#  Rank  1 Group  0 Pid 568624 on   GPU-3882 device  1 [0009:06:00] NVIDIA GB300\n"
          "#  Rank  2 Group  0 Pid 568625 on   GPU-3882 device  2 [0018:06:00] NVIDIA GB300\n"
          "#  Rank  3 Group  0 Pid 568628 on   GPU-3882 device  3 [0019:06:00] NVIDIA GB300\n"
          "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
          "busbw #wrong\n")
LINES = ("  8589934592     536870912     float    none      -1    10308  833.31  624.98      0   9568.2  897.76  "
         "673.32    N/A\n")


def table(tmp_path, text, name="a2a.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_alltoall_table_with_its_header_is_an_all_to_all_sweep(tmp_path):
    sweep = parse_nccl_tests(table(tmp_path, STARTING + HEADER + LINES), None, 0)
    # 8589934592 B / (536870912 elements x 4 B) = 4 ranks, as the four Rank lines say; the faster run, in-place
    assert (sweep.collective, sweep.participants) == ("all_to_all", 4)
    assert sweep.sizes_bytes == (8589934592.0,) and sweep.measured_s == (9568.2e-6,)
    # --collective all_to_all agrees with the header
    assert parse_nccl_tests(table(tmp_path, STARTING + HEADER + LINES), "all_to_all", 0).collective == "all_to_all"


def test_without_the_header_line_the_same_columns_are_an_all_gather_unless_told(tmp_path):
    path = table(tmp_path, HEADER + LINES)
    assert parse_nccl_tests(path, None, 0).collective == "all_gather"  # as before: the columns alone
    told = parse_nccl_tests(path, "all_to_all", 0)
    assert (told.collective, told.participants) == ("all_to_all", 4)


def test_the_all_to_all_curve_reproduces_the_measured_time_by_hand(tmp_path):
    sweep = parse_nccl_tests(table(tmp_path, STARTING + HEADER + LINES), None, 0)
    tier = load_profile("gb200_nvl72").networks[0]
    assert "all_to_all" not in tier.collectives  # the profile states no volume model: its all-gather's applies,
    gather = tier.collectives["all_gather"]  # which gb200_nvl72 states as bytes x 1 x (1 - 1/P)
    assert (gather.volume_multiplier, gather.participant_offset) == (1.0, -1.0)
    curve = sweep_curve(sweep, tier, "t")
    # each rank sends all but its own slice: 8589934592 x (1 - 1/4) bytes in (9568.2 us - latency)
    adjusted = 8589934592 * (1 - 1 / 4)
    expected = adjusted / ((9568.2e-6 - tier.latency_s) * tier.bandwidth_bytes_per_s)
    assert curve.participants == 4 and curve.points[0].efficiency == pytest.approx(expected, rel=1e-12)
    profile = with_sweeps(load_profile("gb200_nvl72"), [sweep])
    assert [c.participants for c in profile.networks[0].measured_collectives["all_to_all"]] == [4]


def test_every_optional_collective_falls_back_to_a_required_ones_volume_model():
    assert set(VOLUME_FALLBACK) == set(COLLECTIVES.of_kind("optional"))
    assert set(VOLUME_FALLBACK.values()) <= set(COLLECTIVES.of_kind("required"))


@pytest.mark.parametrize("text, collective, field, message", [
    # the header says all-to-all, the command line another collective
    (STARTING + HEADER + LINES, "all_gather", "--collective", "all_gather given, the table's header says all_to_all"),
    # the header says all-to-all, the columns an all-reduce (one full message per count, a reduction)
    (STARTING + "#  size\n" + "  1048576  262144  float  sum  -1  92.79  11.30  19.78  0  92.15  11.38  19.91  0\n",
     None, "Collective test", "the header says all_to_all, the table's columns say all_reduce"),
    # a test this importer does not read
    (STARTING.replace("alltoall_perf", "sendrecv_perf") + HEADER + LINES, None, "Collective test",
     "sendrecv_perf: not a table read here"),
    # a failed all-to-all (nccl-tests' own check)
    (STARTING + HEADER + LINES.replace("  0   9568.2", "  2   9568.2"), None, "#wrong", "2: nccl-tests found wrong"),
    # two ranks listed, four in the columns
    (STARTING + "\n".join(HEADER.splitlines()[:3] + HEADER.splitlines()[5:]) + "\n" + LINES, None, "Rank",
     "the table lists 2 ranks, its columns imply 4"),
])
def test_bad_alltoall_tables_are_one_line_naming_the_field_and_write_nothing(tmp_path, capsys, text, collective,
                                                                              field, message):
    path, out = table(tmp_path, text), tmp_path / "c.jsonl"
    with pytest.raises(InputError, match=f"{field}: .*{message}"):
        parse_nccl_tests(path, collective, 0)
    argv = ["evidence", "import", "nccl-tests", path, "--tier", "0", "--output", out]
    argv += ["--collective", collective] if collective else []
    one_error_line(*run(capsys, *argv)[::2], f"{path}: {field}: ")
    assert not out.exists()


def test_the_import_command_writes_the_all_to_all_sweep(tmp_path, capsys):
    path, out = table(tmp_path, STARTING + HEADER + LINES), tmp_path / "c.jsonl"
    status, _, err = run(capsys, "evidence", "import", "nccl-tests", path, "--tier", "0", "--output", out)
    assert status == 0, err
    record = json.loads(out.read_text().splitlines()[1])
    assert (record["collective"], record["participants"], record["measured_s"]) == ("all_to_all", 4, [9568.2e-6])
