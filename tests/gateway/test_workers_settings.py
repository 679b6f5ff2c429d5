"""Which settings may run several worker processes (`config.workers_problem`): never without a shared counter
store, whose absence would multiply every limit by the number of workers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from maasctl.cli import main
from maasctl.gateway.config import GatewaySettings, workers_problem
from maasctl.gateway.providers import relay_token
from maasctl.gateway.workers import WorkerPool, WorkersRefused
from maasctl.localstack import maasctl_argv


@pytest.mark.parametrize("workers", [2, 3, 64])
def test_several_workers_without_redis_are_refused(workers: int) -> None:
    problem = workers_problem(GatewaySettings(workers=workers))
    assert problem is not None and "--redis-url" in problem and f"{workers} times" in problem


@pytest.mark.parametrize("workers", [0, -1, 65])
def test_a_worker_count_out_of_range_is_refused(workers: int) -> None:
    assert "between 1 and 64" in str(workers_problem(GatewaySettings(workers=workers, redis_url="redis://r")))


@pytest.mark.parametrize("settings", [GatewaySettings(), GatewaySettings(workers=1, usage_spool_dir="/x"),
                                      GatewaySettings(workers=2, redis_url="redis://r")])
def test_one_worker_or_a_shared_store_is_accepted(settings: GatewaySettings) -> None:
    assert workers_problem(settings) is None


def test_the_pool_itself_refuses_too() -> None:
    with pytest.raises(WorkersRefused):
        WorkerPool(GatewaySettings(workers=2), _never_run)


@pytest.mark.parametrize("command", ["gateway", "payload-processor"])
def test_both_commands_refuse_to_start_with_a_clear_message(
        command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAASCTL_REDIS_URL", raising=False)
    assert main([command, "--workers", "2"]) == 2
    assert "--workers 2 needs --redis-url" in capsys.readouterr().err
    monkeypatch.setenv("MAASCTL_WORKERS", "3")  # the environment fallback, as for every flag
    assert main([command]) == 2
    assert "--workers 3 needs --redis-url" in capsys.readouterr().err


async def _never_run(settings: GatewaySettings, worker: object) -> int:
    raise AssertionError("never spawned")


def test_the_pool_draws_one_relay_secret_for_all_its_workers_without_a_gateway_token() -> None:
    """The post stage of one worker and the provider relay of another must agree on the relay token."""
    pool = WorkerPool(GatewaySettings(workers=2, redis_url="redis://r", port=0), _never_run)
    bound = pool.start()
    try:
        assert bound.relay_secret and bound.port > 0  # the port the workers will all bind
        assert relay_token(bound.maas_api_token or bound.relay_secret) != relay_token(None)  # not per process
        assert bound.relay_secret not in repr(bound)
    finally:
        pool.close()
    with_token = WorkerPool(GatewaySettings(workers=2, redis_url="redis://r", port=0, maas_api_token="t"), _never_run)
    try:
        assert with_token.start().relay_secret is None  # every replica derives it from the install's token
    finally:
        with_token.close()


def test_a_pool_whose_workers_cannot_start_exits_1_instead_of_serving_fewer(tmp_path: Path) -> None:
    """A worker that dies before it was ever ready (here: no cluster to watch) is a configuration problem, as it
    would be for one process: the parent stops and says so, it never keeps a smaller pool running."""
    missing = tmp_path / "no-such-kubeconfig"
    done = subprocess.run([*maasctl_argv("gateway", "--workers", "2", "--redis-url", "redis://127.0.0.1:1/0",
                                         "--port", "0", f"--kubeconfig={missing}", "--log-format", "json")],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "before it was ready: stopping" in done.stderr
