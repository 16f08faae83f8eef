"""Bad input: one clear line on stderr, exit code 2, no traceback (unless --debug).

Every case runs the real command in a subprocess, on the model files in tests/targets/.
"""
from __future__ import annotations

import os

import pytest

from conftest import TARGETS


def assert_one_line_error(result: tuple[int, str, str], *words: str) -> str:
    """Exit 2, nothing on stdout, exactly one non-empty stderr line holding every word, no traceback."""
    code, out, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("fxflow: error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert out == ""
    return lines[0]


def check(run_fxflow, *args: str):
    return run_fxflow("check", *args, cwd=TARGETS)


def test_file_does_not_exist(run_fxflow):
    assert_one_line_error(check(run_fxflow, "no_such_file.py:Net"), "not found", "no_such_file.py")


def test_syntax_error_names_file_and_line(run_fxflow):
    assert_one_line_error(check(run_fxflow, "syntax_error.py:Net"), "syntax error", "syntax_error.py:5")


def test_failing_import_names_the_missing_module(run_fxflow):
    assert_one_line_error(check(run_fxflow, "import_error.py:Net"), "fxflow_no_such_module_xyz")


def test_file_that_raises_while_loading(run_fxflow):
    assert_one_line_error(check(run_fxflow, "raises_on_import.py:Net"), "RuntimeError", "refuses to load")


def test_unknown_dotted_module(run_fxflow):
    assert_one_line_error(check(run_fxflow, "fxflow_no_such_package.models:Net"), "fxflow_no_such_package")


def test_malformed_target(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:"), "path/to/file.py:Name")


def test_target_without_name_in_a_file_of_many_models_lists_them(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py"), "several nn.Module subclasses", "Good", "Cut", "models.py:")


def test_name_not_in_file_lists_the_modules_there(run_fxflow):
    line = assert_one_line_error(check(run_fxflow, "models.py:Nope"), "Nope", "Good", "Cut", "Embed")
    assert "NotAModule" not in line  # only nn.Module subclasses are offered


@pytest.mark.parametrize("name", ["CONSTANT", "NotAModule", "returns_int"])
def test_name_is_not_a_module(run_fxflow, name):
    line = assert_one_line_error(check(run_fxflow, f"models.py:{name}"), name)
    assert "nn.Module" in line


def test_constructor_arguments_are_named_with_the_flag(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:NeedsArgs"), "hidden", "depth", "--arg")


def test_unknown_constructor_argument(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:Good", "--arg", "width=3"), "width")


def test_malformed_arg(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:NeedsArgs", "--arg", "hidden"), "--arg", "key=value")


@pytest.mark.parametrize("spec", ["16x10", "1,x", "", "2,3:complex999"])
def test_malformed_input_size(run_fxflow, spec):
    assert_one_line_error(check(run_fxflow, "models.py:Good", "--input-size", spec), "--input-size")


def test_wrong_number_of_inputs(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:Good", "--input-size", "2,10", "--input-size", "2,3"),
                          "forward takes 1", "2 were given", "--input-size")


def test_too_few_inputs(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:TwoInputs", "--input-size", "2,10"),
                          "forward takes 2", "--input-size")


def test_forward_raises_shows_the_models_own_message(run_fxflow):
    # example_inputs() gives 7 features, the Linear wants 10: the fake-tensor analysis fails
    # first and must stay silent; the user sees torch's own shape message from the real forward.
    assert_one_line_error(check(run_fxflow, "forward_raises.py:Net"),
                          "forward raised", "mat1 and mat2 shapes cannot be multiplied", "--input-size")


def test_forward_raises_its_own_exception(run_fxflow):
    assert_one_line_error(check(run_fxflow, "forward_assert.py:Net", "--input-size", "2,7"),
                          "ValueError", "Net wants 10 features, got 7", "--input-size")


def test_output_without_floating_tensor(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:IntOutput"), "no floating")


def test_unknown_flag(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:Good", "--bogus"), "--bogus")


def test_unknown_command(run_fxflow):
    code, out, err = run_fxflow("frobnicate", cwd=TARGETS)
    assert_one_line_error((code, out, err), "frobnicate")


def test_bad_flag_value(run_fxflow):
    assert_one_line_error(check(run_fxflow, "models.py:Good", "--seed", "abc"), "--seed")


def test_output_folder_does_not_exist(run_fxflow, tmp_path):
    target = tmp_path / "missing" / "flow.svg"
    assert_one_line_error(run_fxflow("render", f"{TARGETS}/models.py:Good", "-o", str(target)),
                          "cannot write", "does not exist")


def test_output_is_a_folder(run_fxflow, tmp_path):
    assert_one_line_error(run_fxflow("render", f"{TARGETS}/models.py:Good", "-o", str(tmp_path)),
                          "cannot write", "folder")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_output_folder_not_writable(run_fxflow, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert_one_line_error(run_fxflow("render", f"{TARGETS}/models.py:Good", "-o", str(folder / "f.svg")),
                              "cannot write", "permission")
    finally:
        folder.chmod(0o700)


def test_debug_shows_the_traceback(run_fxflow):
    code, out, err = check(run_fxflow, "forward_raises.py:Net", "--debug")
    assert code != 0
    assert "Traceback" in err
    assert "mat1 and mat2" in err


def test_a_model_without_parameters_has_nothing_to_train(run_fxflow):
    code, out, err = check(run_fxflow, "models.py:NoParams", "--input-size", "2,10")
    assert code == 0, err
    assert "Traceback" not in err
    assert out.strip().splitlines()[-1] == "nothing to train: the model has no parameters, so there is no gradient to verify"


def test_every_parameter_frozen_is_a_model_that_cannot_learn(run_fxflow):
    """Frozen by mistake (the whole model, where only a backbone was meant): a plain backward raises,
    so the check fails, where it used to say "ok: all 0 trainable parameters get a gradient"."""
    import torch

    from fxflow.prepare.load import import_location

    model = import_location(str(TARGETS / "models.py")).AllFrozen()
    with pytest.raises(RuntimeError, match="does not require grad"):
        model(torch.randn(2, 10)).sum().backward()
    code, out, err = check(run_fxflow, "models.py:AllFrozen", "--input-size", "2,10")
    assert code == 1, err
    assert "Traceback" not in err
    assert out.strip().splitlines()[-1] == (
        "problem: nothing will learn: every parameter is frozen (loss.backward() would raise)")
