"""A workload ServiceAccount that is the operator's own is refused: in a spec of the operator's
namespace (InvalidSpec), and as a default flag at ``neuronfleet run``'s start.

In the operator's namespace, compile Jobs or serving pods running as its account would get its IAM
role (IRSA and EKS Pod Identity bind a role to a namespace and an account) and run as the account
its cluster-wide roles are bound to. The chart refused such a value only when it created the
account; a spec naming it, or a default flag, was taken.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from neuronfleet import run_command
from neuronfleet.cli import main
from neuronfleet.planning.admission import (
    OperatorAccount,
    OwnAccountCleanup,
    RunningAs,
    own_account_cleanup,
    own_account_message,
    own_account_problem,
    own_default_problem,
    workload_account,
)
from neuronfleet.reconcile import OperatorSettings

OPERATOR = OperatorAccount("neuronfleet-system", "nf-neuronfleet")


def accounts(
    compile_spec: str | None = None,
    serving_spec: str | None = None,
    compile_default: str | None = "nf-compile",
    serving_default: str | None = "nf-serving",
) -> tuple[Any, ...]:
    return (
        workload_account("compile", compile_spec, compile_default),
        workload_account("serving", serving_spec, serving_default),
    )


# ---------------------------------------------------------------------------- the pure rule


def test_a_serving_account_named_like_the_operators_in_its_namespace_is_refused_saying_why_and_what_to_do() -> None:
    problem = own_account_problem("neuronfleet-system", accounts(serving_spec="nf-neuronfleet"), OPERATOR)
    assert problem == (
        "the serving pods would run as ServiceAccount nf-neuronfleet, the operator's own in its namespace "
        "neuronfleet-system (named by spec.runtime.serviceAccountName): they would get the operator's IAM role "
        "(IRSA or EKS Pod Identity) and run as the account its cluster-wide RBAC roles are bound to, so nothing "
        "of this spec is created and its placeholders, warm pods and compile Jobs running as that account are "
        "deleted; set spec.runtime.serviceAccountName to an account of their own (the chart's "
        "workloads.servingServiceAccount is one: docs/install-eks.md), or create the deployment in another namespace"
    )


def test_a_compile_account_is_refused_too_and_both_are_named_when_both_are_the_operators() -> None:
    compile_only = own_account_problem("neuronfleet-system", accounts(compile_spec="nf-neuronfleet"), OPERATOR)
    assert compile_only is not None
    assert compile_only.startswith("the compile Job's pod would run as ServiceAccount nf-neuronfleet")
    assert "(named by spec.compile.serviceAccountName): it would get the operator's IAM role" in compile_only
    both = own_account_problem(
        "neuronfleet-system", accounts(compile_spec="nf-neuronfleet", serving_spec="nf-neuronfleet"), OPERATOR
    )
    assert both is not None and both.startswith(compile_only + "; the serving pods would run as")


def test_the_same_name_in_another_namespace_is_another_account() -> None:
    assert own_account_problem("search", accounts("nf-neuronfleet", "nf-neuronfleet"), OPERATOR) is None


def test_other_accounts_pass_and_nothing_is_refused_when_the_operators_account_is_unknown() -> None:
    assert own_account_problem("neuronfleet-system", accounts("bert-compile", "bert-serving"), OPERATOR) is None
    assert own_account_problem("neuronfleet-system", accounts(), OPERATOR) is None
    # Outside a pod (the sandbox, a laptop): no account of its own to compare with.
    assert own_account_problem("neuronfleet-system", accounts("nf-neuronfleet", "nf-neuronfleet"), None) is None


def test_the_operators_default_flag_is_named_when_the_spec_names_no_account() -> None:
    problem = own_account_problem("neuronfleet-system", accounts(serving_default="nf-neuronfleet"), OPERATOR)
    assert problem is not None
    assert "(named by the operator's --serving-service-account (chart: workloads.servingServiceAccount)" in problem
    assert "set spec.runtime.serviceAccountName, or the operator's --serving-service-account" in problem


def test_an_operator_running_as_default_refuses_the_workloads_of_its_namespace_that_name_no_account() -> None:
    # Outside the chart (which refuses it): the workloads naming none run as the namespace's default.
    operator = OperatorAccount("ops", "default")
    problem = own_account_problem("ops", accounts(None, None, None, None), operator)
    assert problem is not None
    assert problem.count("would run as ServiceAccount default") == 2
    assert "run the operator as an account of its own" in problem
    assert own_account_problem("ops", accounts(None, "reader", None, None), operator) is not None  # compile still
    assert own_account_problem("ops", accounts("writer", "reader", None, None), operator) is None


def test_a_default_flag_naming_the_operators_account_is_refused() -> None:
    problem = own_default_problem("compile", "nf-neuronfleet", OPERATOR)
    assert problem == (
        "--compile-service-account is nf-neuronfleet, the operator's own ServiceAccount (in its namespace "
        "neuronfleet-system): the compile Jobs of specs there that leave spec.compile.serviceAccountName unset "
        "would get the operator's IAM role (IRSA or EKS Pod Identity) and run as the account its cluster-wide "
        "RBAC roles are bound to; name an account of the compile Jobs' own (chart: workloads.compileServiceAccount, "
        "created by workloads.serviceAccounts: docs/install-eks.md)"
    )
    assert own_default_problem("serving", "nf-serving", OPERATOR) is None
    assert own_default_problem("serving", None, OPERATOR) is None


# --------------------------------------------------------------------- neuronfleet run's options


@pytest.fixture(autouse=True)
def no_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in (
        "NEURONFLEET_OPERATOR_SERVICE_ACCOUNT",
        "NEURONFLEET_OPERATOR_NAMESPACE",
        "NEURONFLEET_COMPILE_SERVICE_ACCOUNT",
        "NEURONFLEET_SERVING_SERVICE_ACCOUNT",
    ):
        monkeypatch.delenv(name, raising=False)


def _kubeconfig(path: Path) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[int, list[OperatorSettings]]:
    """``neuronfleet run`` up to the point where it would connect: its exit code and the settings built."""
    seen: list[OperatorSettings] = []

    async def build_context(settings: OperatorSettings, *args: Any, **kwargs: Any) -> Any:
        seen.append(settings)
        raise run_command.RunSetupError("stopped before connecting")

    monkeypatch.setattr(run_command, "build_context", build_context)
    return main(["run", "--kubeconfig", _kubeconfig(tmp_path / "kubeconfig"), *flags]), seen


def test_run_takes_its_own_account_from_the_variables_the_chart_sets_and_flags_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, (settings,) = _run(tmp_path, monkeypatch)
    assert settings.operator_account is None  # outside a pod: nothing is refused
    monkeypatch.setenv("NEURONFLEET_OPERATOR_SERVICE_ACCOUNT", "nf-neuronfleet")
    monkeypatch.setenv("NEURONFLEET_OPERATOR_NAMESPACE", "neuronfleet-system")
    _, (settings,) = _run(tmp_path, monkeypatch)
    assert settings.operator_account == OPERATOR
    _, (settings,) = _run(tmp_path, monkeypatch, "--operator-namespace", "ops")
    assert settings.operator_account == OperatorAccount("ops", "nf-neuronfleet")
    # A namespace name is at most 63 characters: the longest is taken.
    _, (settings,) = _run(tmp_path, monkeypatch, "--operator-namespace", "n" * 63)
    assert settings.operator_account == OperatorAccount("n" * 63, "nf-neuronfleet")
    assert _run(tmp_path, monkeypatch, "--operator-namespace", "n" * 64) == (2, [])


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        (
            {"NEURONFLEET_OPERATOR_SERVICE_ACCOUNT": "nf-neuronfleet"},
            "error: --operator-service-account is set but --operator-namespace (env NEURONFLEET_OPERATOR_NAMESPACE) "
            "is not",
        ),
        (
            {"NEURONFLEET_OPERATOR_NAMESPACE": "neuronfleet-system"},
            "error: --operator-namespace is set but --operator-service-account (env "
            "NEURONFLEET_OPERATOR_SERVICE_ACCOUNT) is not",
        ),
        (
            {"NEURONFLEET_OPERATOR_SERVICE_ACCOUNT": "NF", "NEURONFLEET_OPERATOR_NAMESPACE": "neuronfleet-system"},
            "error: --operator-service-account (env NEURONFLEET_OPERATOR_SERVICE_ACCOUNT): 'NF' is not a "
            "ServiceAccount name",
        ),
        (
            {"NEURONFLEET_OPERATOR_SERVICE_ACCOUNT": "nf", "NEURONFLEET_OPERATOR_NAMESPACE": "ops.system"},
            "error: --operator-namespace (env NEURONFLEET_OPERATOR_NAMESPACE): 'ops.system' is not a namespace name",
        ),
    ],
)
def test_run_refuses_half_or_malformed_identity_in_one_line(
    variables: dict[str, str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    code, seen = _run(tmp_path, monkeypatch)
    assert (code, seen) == (2, [])
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--compile-service-account", "--serving-service-account"])
def test_run_refuses_to_start_with_a_default_account_that_is_its_own(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NEURONFLEET_OPERATOR_SERVICE_ACCOUNT", "nf-neuronfleet")
    monkeypatch.setenv("NEURONFLEET_OPERATOR_NAMESPACE", "neuronfleet-system")
    code, seen = _run(tmp_path, monkeypatch, flag, "nf-neuronfleet")
    assert (code, seen) == (2, [])
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} is nf-neuronfleet, the operator's own ServiceAccount (in its namespace ")
    assert err.count("\n") == 1
    # Watching its own namespace by name, or by a pattern that may take it in: refused as well.
    for watched in (["-n", "neuronfleet-system"], ["-n", "search", "-n", "neuronfleet-*"]):
        assert _run(tmp_path, monkeypatch, flag, "nf-neuronfleet", *watched) == (2, [])
    # Not watching it: that name in the namespaces watched is another account.
    code, (settings,) = _run(tmp_path, monkeypatch, flag, "nf-neuronfleet", "-n", "search")
    assert settings.operator_account == OPERATOR


@pytest.mark.parametrize(
    ("watched", "refused"),
    [
        (["--namespace=!neuronfleet-system"], False),  # every namespace but the operator's
        (["--namespace=!neuronfleet-*"], False),
        (["--namespace=team-*,!team-b"], False),
        (["--namespace=neuronfleet-*,!neuronfleet-system"], False),
        (["--namespace=!team-b"], True),  # every namespace but team-b: the operator's among them
        (["--namespace=!neuronfleet-*,neuronfleet-system"], True),  # excluded, then taken in again
        (["--namespace=team-a", "--namespace=!team-b"], True),  # the second takes in all but team-b
        (["--namespace=neuronfleet-?ystem"], True),
    ],
)
def test_a_default_flag_is_refused_only_where_kopf_would_watch_the_operators_namespace(
    watched: list[str], refused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kopf's namespace patterns: globs, ``!`` excludes, a leading exclusion implies ``*``, comma-separated
    parts, several --namespace flags are alternatives. A namespace they leave out is not watched, and a
    default account of the operator's name is another object in every namespace they take in."""
    monkeypatch.setenv("NEURONFLEET_OPERATOR_SERVICE_ACCOUNT", "nf-neuronfleet")
    monkeypatch.setenv("NEURONFLEET_OPERATOR_NAMESPACE", "neuronfleet-system")
    code, seen = _run(tmp_path, monkeypatch, "--compile-service-account", "nf-neuronfleet", *watched)
    if refused:
        assert (code, seen) == (2, [])
    else:
        assert [settings.operator_account for settings in seen] == [OPERATOR]


def test_run_warns_at_start_when_it_runs_as_its_namespaces_default_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside the chart (which refuses it) the operator may run as ``default``: every pod of its
    namespace that names no account has its rights, which the operator cannot refuse; it says so."""
    monkeypatch.setenv("NEURONFLEET_OPERATOR_NAMESPACE", "neuronfleet-system")
    monkeypatch.setenv("NEURONFLEET_OPERATOR_SERVICE_ACCOUNT", "nf-neuronfleet")
    with caplog.at_level(logging.WARNING, logger="neuronfleet.run_command"):
        _run(tmp_path, monkeypatch)
    assert not [r for r in caplog.records if "default account" in r.getMessage()]
    monkeypatch.setenv("NEURONFLEET_OPERATOR_SERVICE_ACCOUNT", "default")
    with caplog.at_level(logging.WARNING, logger="neuronfleet.run_command"):
        _, (settings,) = _run(tmp_path, monkeypatch)
    assert settings.operator_account == OperatorAccount("neuronfleet-system", "default")
    (warning,) = [r for r in caplog.records if "default account" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().startswith(
        "the operator runs as ServiceAccount default, namespace neuronfleet-system's default account: every pod "
        "there that names no account runs with the operator's rights"
    )


def test_a_refused_specs_idle_pods_and_compile_jobs_as_the_operators_account_go_and_serving_pods_are_named() -> None:
    """Made before the operator knew its account (or before the check): placeholders, warm pods and
    compile Jobs serve nothing and are deleted; pods taking traffic stay, each named, with the fix."""
    running = (
        RunningAs("borrowed-a", "active", "nf-neuronfleet"),
        RunningAs("borrowed-w", "warm", "nf-neuronfleet"),
        RunningAs("borrowed-ph", "placeholder", "nf-neuronfleet"),
        RunningAs("borrowed-d", "draining", "nf-neuronfleet"),
        RunningAs("borrowed-compile-1", "compile", "nf-neuronfleet"),
        RunningAs("borrowed-other", "active", "model-reader"),  # another account: left alone
        RunningAs("borrowed-compile-2", "compile", "nf-compile"),
    )
    cleanup = own_account_cleanup(running, OPERATOR)
    assert cleanup.pods == ("borrowed-w", "borrowed-ph")
    assert cleanup.jobs == ("borrowed-compile-1",)
    assert [item.name for item in cleanup.kept] == ["borrowed-a", "borrowed-d"]
    problem = own_account_problem("neuronfleet-system", accounts(serving_spec="nf-neuronfleet"), OPERATOR)
    assert problem is not None
    message = own_account_message(problem, cleanup)
    assert message.startswith(problem + ". 2 serving pods made before still run as that account and take traffic: ")
    assert "borrowed-a (active), borrowed-d (draining); the operator keeps them" in message
    assert own_account_message(problem, OwnAccountCleanup((), (), ())) == problem


def test_the_own_account_message_names_at_most_five_serving_pods() -> None:
    """Hundreds of pods named would make a condition message of kilobytes (15 KB for 500): five are
    named, the rest counted."""
    running = tuple(RunningAs(f"bert-5f3c9a1b2d-{i:03}", "active", "nf-neuronfleet") for i in range(500))
    cleanup = own_account_cleanup(running, OPERATOR)
    message = own_account_message("refused", cleanup)
    named = ", ".join(f"bert-5f3c9a1b2d-{i:03} (active)" for i in range(5))
    assert f"500 serving pods made before still run as that account and take traffic: {named} and 495 more;" in message
    assert "bert-5f3c9a1b2d-005" not in message
    assert len(message) < 1000
    six = own_account_cleanup(running[:6], OPERATOR)
    assert "and 1 more;" in own_account_message("refused", six)
    five = own_account_cleanup(running[:5], OPERATOR)
    assert f"{named};" in own_account_message("refused", five)
