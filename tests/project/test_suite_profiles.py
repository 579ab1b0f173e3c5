"""The suite's hypothesis profiles: CI runs what it always ran, the inner loop a tenth.

`ci` must never shrink what CI checks (hypothesis's own CI settings, 100 examples a
test unless the test asks for more); `dev` is chosen everywhere else unless
`$HYPOTHESIS_PROFILE` says otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import CI_EXAMPLES, DEV_EXAMPLES, REPO_ROOT, examples, profile_name


@contextmanager
def profile(name: str) -> Iterator[None]:
    saved = settings.get_current_profile_name()
    settings.load_profile(name)
    try:
        yield
    finally:
        settings.load_profile(saved)


@pytest.mark.parametrize(
    ("environ", "chosen"),
    [
        ({}, "dev"),
        ({"CI": "true"}, "ci"),
        ({"CI": ""}, "dev"),
        ({"HYPOTHESIS_PROFILE": "dev", "CI": "true"}, "dev"),
        ({"HYPOTHESIS_PROFILE": "ci"}, "ci"),
        ({"HYPOTHESIS_PROFILE": "", "CI": "1"}, "ci"),
    ],
)
def test_the_profile_is_chosen_by_the_environment(environ: dict[str, str], chosen: str) -> None:
    assert profile_name(environ) == chosen


def test_the_ci_profile_is_what_ci_always_ran() -> None:
    ci = settings.get_profile("ci")
    assert ci.max_examples == CI_EXAMPLES == 100
    assert ci.derandomize and ci.deadline is None and ci.database is None
    assert ci.print_blob and list(ci.suppress_health_check) == [HealthCheck.too_slow]


def test_the_dev_profile_runs_a_tenth() -> None:
    dev = settings.get_profile("dev")
    assert dev.max_examples == DEV_EXAMPLES == CI_EXAMPLES // 10
    assert dev.deadline is None


@pytest.mark.parametrize(("ci", "dev"), [(1, 1), (3, 1), (60, 6), (150, 15), (1500, 150)])
def test_a_tests_own_count_is_kept_under_ci_and_scaled_under_dev(ci: int, dev: int) -> None:
    with profile("ci"):
        assert examples(ci) == ci
    with profile("dev"):
        assert examples(ci) == dev


def test_an_environment_override_wins_under_every_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSIONTREE_TEST_OVERRIDE", "7")
    for name in ("ci", "dev"):
        with profile(name):
            assert examples(300, "SESSIONTREE_TEST_OVERRIDE") == 7
            assert examples(300, "SESSIONTREE_TEST_UNSET") == (300 if name == "ci" else 30)


@pytest.mark.parametrize(
    ("environ", "loaded"),
    [
        ({}, "dev 10 False"),
        ({"CI": "true"}, "ci 100 True"),
        ({"HYPOTHESIS_PROFILE": "ci"}, "ci 100 True"),
    ],
)
def test_importing_the_conftest_loads_the_chosen_profile(
    environ: dict[str, str], loaded: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    code = (
        "import tests.conftest; from hypothesis import settings; d = settings.default; "
        "print(settings.get_current_profile_name(), d.max_examples, d.derandomize)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split("\n")[0] == loaded
