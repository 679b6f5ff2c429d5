"""`maasctl dev`: the whole product on a laptop: a local control plane, all CRDs, the controller."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path

import structlog

from maasctl.app import run_controller, stop_on_signals
from maasctl.settings import ControllerSettings
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import install_third_party_crds

log = structlog.get_logger("maasctl.dev")


async def run_dev(settings: ControllerSettings, directory: Path) -> int:
    """Start the local control plane in `directory`, install CRDs, run the controller until Ctrl-C."""
    stop = asyncio.Event()
    stop_on_signals(stop)
    data = directory.resolve() / "controlplane"
    shutil.rmtree(data, ignore_errors=True)
    cp = ControlPlane(directory=data)
    log.info("starting local control plane", directory=str(data))
    await asyncio.to_thread(cp.start)
    try:
        with cp.http_client() as http:
            crds = await asyncio.to_thread(install_third_party_crds, http)
        kubeconfig = directory.resolve() / "kubeconfig"
        shutil.copyfile(cp.kubeconfig, kubeconfig)
        kubeconfig.chmod(0o600)
        log.info("local control plane ready", server=cp.server, kubeconfig=str(kubeconfig), crds=len(crds))
        print(f"\n  export KUBECONFIG={kubeconfig}\n  kubectl get crds   # while this runs; Ctrl-C stops\n",
              flush=True)
        return await run_controller(dataclasses.replace(settings, kubeconfig=str(kubeconfig)), stop)
    finally:
        await asyncio.to_thread(cp.stop)
