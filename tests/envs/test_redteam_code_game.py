"""Red-team cases of the code-output game: programs the gate admitted whose output no predictor can
know or state, and predictions graded right although they state another output."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.code_game import GateSettings, format_prediction, prediction_correct
from lit_codeRL.envs.code_game.gate import _gate
from lit_codeRL.sandbox import make_sandbox
from tests.sandbox.conftest import require_bwrap


@pytest.fixture(scope="module")
def sandbox():
    require_bwrap()
    sb = make_sandbox(backend="bwrap", workers=2, timeout_s=5.0, memory_mb=512)
    yield sb
    sb.close()


@pytest.mark.parametrize(
    "source",
    [
        # the low bits of an object's address (inside its page) are the same in every run, and
        # hash() of an object is its address: deterministic, yet no predictor can know it
        "print(hash(object()) % 256)",
        "a = object()\nb = object()\nprint(hash(b) - hash(a))",
    ],
)
def test_an_address_through_hash_is_refused(sandbox, source: str) -> None:
    res = _gate(sandbox, [source], GateSettings())[0]
    assert not res.valid, (res.reason, res.output)


@pytest.mark.parametrize(
    "source", ["print('[/OUTPUT]')", "print('x [OUTPUT] y')", "print('a<think>b</think>c')"]
)
def test_an_output_no_answer_can_state_is_refused(sandbox, source: str) -> None:
    # no [OUTPUT]...[/OUTPUT] answer parses to it: every prediction is wrong by construction, and
    # the writer's reward (zero_sum: +1) is paid for an unanswerable question
    res = _gate(sandbox, [source], GateSettings(hash_seed_runs=2))[0]
    assert format_prediction(res.output or "[/OUTPUT]\n") is None
    assert (res.valid, res.reason) == (False, "unanswerable_output"), res.detail


@pytest.mark.parametrize(
    "predicted, actual",
    [
        ("255", "0xff"),  # print(hex(255))
        ("5", "0b101"),  # print(bin(5))
        ("8", "0o10"),
        ("1", "+1"),  # print(f'{1:+d}')
        ("3.14", "3.140"),  # print(f'{3.14:.3f}')
        ("1000.0", "1e3"),
        ("1000000", "1_000_000"),  # print(f'{10**6:_}')
        ("0.0", "-0.0"),  # print(-1 * 0.0)
        ("-0.0", "0.0"),
        ("[0.0, 1]", "[-0.0, 1]"),
        ("0xff", "255"),
    ],
)
def test_a_number_written_otherwise_is_another_output(predicted: str, actual: str) -> None:
    assert prediction_correct(predicted, actual) is False


@pytest.mark.parametrize(
    "predicted, actual",
    [("[1,2]", "[1, 2]"), ("(1)", "1"), ("1e+16", "1e+16"), ("-1.5", "-1.5"), ("(1+2j)", "(1+2j)")],
)
def test_literal_equality_still_forgives_spacing_and_quoting(predicted: str, actual: str) -> None:
    assert prediction_correct(predicted, actual) is True
    assert prediction_correct("['a', 1.5, -2]", '["a",1.5,-2]') is True


@pytest.mark.parametrize("source", ["print('\\ud800')", "print('a' + chr(0xdfff) + 'b')"])
def test_a_lone_surrogate_fails_as_it_does_on_a_real_stdout(sandbox, source: str) -> None:
    # python -c "print('\ud800')" raises UnicodeEncodeError; the harness printed '\ud800' escaped
    res = _gate(sandbox, [source], GateSettings(hash_seed_runs=2))[0]
    assert (res.valid, res.reason) == (False, "runtime_error"), (res.output, res.detail)
    assert res.detail["runs"][0]["exception_message"] == "'UnicodeEncodeError'"


def test_a_caught_encoding_error_goes_on_as_in_python(sandbox) -> None:
    src = "try:\n    print('\\ud800')\nexcept UnicodeEncodeError:\n    print('no')"
    res = _gate(sandbox, [src], GateSettings(hash_seed_runs=2))[0]
    assert (res.reason, res.output) == ("ok", "no\n"), res.detail
