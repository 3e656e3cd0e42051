"""benchmark/speed_by_machine.py's table: a new measurement replaces the row of the same CPU, ISA and script, and
keeps every other machine's rows and the text around the table."""

import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_benchmark():
    spec = importlib.util.spec_from_file_location("speed_by_machine", os.path.join(REPO, "benchmark", "speed_by_machine.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(date: str, cpu: str, isa: str, script: str, ratio: str) -> str:
    return f"| {date} | {cpu} | {isa} | `{script}` (precision: fp32) | ref | 1 / 1 | 1 / 2 | {ratio} | not run | |"


def key(line: str) -> tuple[str, ...]:
    return load_benchmark().row_key(line)


def test_rows_of_other_machines_survive_and_the_same_machine_is_replaced(tmp_path, monkeypatch):
    bench = load_benchmark()
    table = tmp_path / "speed.md"
    old_zen3 = row("2026-11-01", "EPYC Zen 3 (2)", "AVX2", "ppo_atari_envpool", "1.20x")
    old_here = row("2026-11-01", "AMD EPYC (2)", "AVX-512-BF16", "ppo_atari_envpool", "1.40x")
    table.write_text("# intro\n\n" + bench.HEADER + "\n|---|\n" + old_zen3 + "\n" + old_here + "\n\n## after\ntext\n")
    monkeypatch.setattr(bench, "TABLE", str(table))

    new_here = row("2026-11-25", "AMD EPYC (2)", "AVX-512-BF16", "ppo_atari_envpool", "1.59x").replace("fp32", "bf16")
    new_dqn = row("2026-11-25", "AMD EPYC (2)", "AVX-512-BF16", "dqn_atari_envpool", "1.77x")
    bench.write_rows({key(new_here): new_here, key(new_dqn): new_dqn})

    lines = table.read_text().splitlines()
    body = [line for line in lines if line.startswith("| 2026")]
    assert old_zen3 in body and new_here in body and new_dqn in body and old_here not in body
    assert len(body) == 3
    assert lines[0] == "# intro" and lines[-2:] == ["## after", "text"]


def test_a_missing_table_is_created_with_its_header(tmp_path, monkeypatch):
    bench = load_benchmark()
    monkeypatch.setattr(bench, "TABLE", str(tmp_path / "docs" / "speed.md"))
    line = row("2026-11-25", "AMD EPYC (2)", "AVX2", "sac_continuous_action_envpool", "2.00x")
    bench.write_rows({key(line): line})
    lines = (tmp_path / "docs" / "speed.md").read_text().splitlines()
    assert bench.HEADER in lines and lines[-1] == line


def test_pairs_alternate_the_sides_and_the_row_gives_medians_and_the_pairs_range(tmp_path, monkeypatch):
    """--pairs 3: reference, script, reference, script, ... (a drift of the machine's speed meets both sides alike);
    the row's SPS are each side's median and its ratio is theirs, with the lowest and highest pair's ratio beside it."""
    bench = load_benchmark()
    order, speeds = [], {"reference": iter([80.0, 90.0, 70.0]), "script": iter([110.0, 120.0, 100.0])}
    monkeypatch.setattr(bench, "run_together", lambda commands, out: order.append(commands[0][0]) or "precision: fp32")
    monkeypatch.setattr(bench, "learning_sps", lambda run_dir, from_step: next(speeds[run_dir.split("-")[-3]]))
    row = bench.Row("x_atari", ["cleanrl/x.py"], "CleanRL layout", ["benchmark/x_layout.py"], 5000, 2000, 3024)
    figures = bench.measure(row, 1.0, str(tmp_path), idle_only=True, pairs=3)
    assert order == ["benchmark/x_layout.py", "cleanrl/x.py"] * 3
    cells = [cell.strip() for cell in bench.table_row(row, figures, "AMD EPYC", "AVX2").split("|")[1:-1]]
    # medians 80 and 110; the pairs' ratios 1.375, 1.333, 1.429
    assert cells[6:9] == ["80 / 110 (medians of 3 alternating pairs)", "1.38x (pairs 1.33-1.43x)", "not run"]


def test_one_pair_keeps_the_rows_old_form(tmp_path, monkeypatch):
    bench = load_benchmark()
    monkeypatch.setattr(bench, "run_together", lambda commands, out: "precision: fp32")
    monkeypatch.setattr(bench, "learning_sps", lambda run_dir, from_step: 100.0 if "-script-" in run_dir else 80.0)
    row = bench.Row("x_atari", ["cleanrl/x.py"], "CleanRL layout", ["benchmark/x_layout.py"], 5000, 2000, 3024)
    cells = bench.table_row(row, bench.measure(row, 1.0, str(tmp_path), idle_only=True), "AMD EPYC", "AVX2").split("|")
    assert [cell.strip() for cell in cells[7:9]] == ["80 / 100", "1.25x"]
