"""Help pages and messages as a newcomer meets them (issue 39): examples, help for every option, closed sets as choices,
the eval options under headings, the audit usage line, and install hints that keep their [extras]."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.backends.vllm import import_vllm
from cfbench.harness.cli_output import one_line_errors
from cfbench.harness.errors import CfbenchError


def _help(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=200, prog_name="cfbench")
    assert result.exit_code == 0, result.output
    return result.output


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def test_every_option_of_every_command_has_help_text():
    missing = [
        f"cfbench {' '.join(path)} {param.opts[0]}"
        for path, command in _commands(main)
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize("command", [("eval",), ("train",), ("leaderboard",), ("compare",), ("index", "build"), ()])
def test_the_main_commands_show_examples(command):
    text = _help(*command)
    assert "Example" in text and "cfbench " + (command[0] if command else "eval") in text.split("Example", 1)[1]


def test_ckpt_help_names_every_bundled_model():
    assert "smollm2-135m-search" in _help("eval") and "smollm2-135m-search" in _help("serve-model")


@pytest.mark.parametrize(
    "args, option, value",
    [
        (["train", "--scale", "cpu"], "--treatment", "search-r2"),
        (["train", "--treatment", "search-r1"], "--scale", "gpu"),
        (["index", "build", "--corpus", "c.jsonl", "--out", "x"], "--kind", "bm26"),
        (["index", "build", "--corpus", "c.jsonl", "--out", "x", "--kind", "bm25"], "--dtype", "int8"),
    ],
)
def test_closed_sets_are_choices_refused_with_the_valid_values(args, option, value):
    result = CliRunner().invoke(main, [*args, option, value])
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output and "is not one of" in result.output


def test_train_choices_list_every_treatment_and_scale():
    text = _help("train")
    assert "[base|search-r1|dr-zero|msv|crossfit|msv-crossfit|warm-start|warm-start-proposer]" in text and "[cpu|cpu-smoke|paper]" in text


def test_eval_options_are_grouped_by_what_they_configure():
    text = _help("eval")
    headings = [line.rstrip(":") for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert headings[0] == "Options" and headings[1:] == [
        "Retrieval",
        "Protocol knobs (a run with other values is ranked apart from protocol v1's)",
        "hf backend (transformers in process)",
        "vllm backend (GPU)",
        "openai backend (an OpenAI-compatible server)",
    ]
    section = {}
    current = None
    for line in text.splitlines():
        if line.rstrip(":") in headings:
            current = line.rstrip(":")
        elif current and line.strip().startswith("--"):
            section[line.split()[0]] = current
    assert section["--base-url"].startswith("openai") and section["--tensor-parallel-size"].startswith("vllm")
    assert section["--max-searches"].startswith("Protocol") and section["--limit"] == "Options"
    assert "--max-obs-tokens" in text and "Retrieved text is cut" in text


def test_the_audit_usage_line_names_the_command_once():
    assert "Usage: cfbench audit [OPTIONS] RUNS..." in _help("audit", "some-run")
    assert "Usage: cfbench audit review [OPTIONS] RUN" in _help("audit", "review")


def test_an_install_hint_keeps_its_extra_on_the_terminal(capsys):
    """rich markup would read [vllm] as a style tag and print pip install 'cfbench'."""
    with pytest.raises(SystemExit) as exit_, one_line_errors():
        import_vllm()  # the CPU test machine has no vLLM
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'cfbench[vllm]'" in err and err.startswith("error: ")


def test_user_text_with_brackets_is_printed_as_given(capsys):
    with pytest.raises(SystemExit), one_line_errors():
        raise CfbenchError("runs/[bold]x[/bold]: pip install 'cfbench[lucene]'")
    assert capsys.readouterr().err == "error: runs/[bold]x[/bold]: pip install 'cfbench[lucene]'\n"


def test_a_model_name_with_brackets_is_shown_as_given_in_compare(tmp_path):
    from leaderboard_runs import write_run

    a = write_run(tmp_path / "a", 0.5, seed=1, model="org/model[bold]-v2")
    b = write_run(tmp_path / "b", 0.4, seed=2, model="org/model[lucene]")
    result = CliRunner().invoke(main, ["compare", str(a), str(b)], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "org/model[bold]-v2" in result.output and "org/model[lucene]" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--treatment", "search-r1", "--scale", "gpu"], "Invalid value for '--scale': 'gpu' is not one of"),
        (["train", "--treatment", "search-r1"], "Missing option '--out' (see cfbench train --help)"),
        (["evl"], "No such command 'evl'. Did you mean 'eval'? (see cfbench --help)"),
        (["eval", "--limit", "0", "--out", "x"], "Invalid value for '--limit': 0 is not in the range x>=1"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_help(args, message):
    result = CliRunner().invoke(main, args, prog_name="cfbench", terminal_width=100)
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line


def test_help_and_version_still_exit_0():
    for args in (["--help"], ["--version"], ["eval", "--help"]):
        assert CliRunner().invoke(main, args).exit_code == 0
