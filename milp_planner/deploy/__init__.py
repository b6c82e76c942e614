"""Deployment: a plan as per-device ONNX sub-models and messages, run with one MPI rank per device.

``deploy(instance, plan, out_dir)`` writes the folder (sub-models, ``manifest.json``,
hostfile, README); ``run_deployment(out_dir, ...)`` runs it under ``mpiexec`` on this machine
and returns what ``milp-planner run --json`` prints; ``execute_sequential(out_dir)`` runs the
same sub-models in this process (no MPI) and returns the outputs. See docs/deploy.md.
"""

from milp_planner.deploy.build import deploy
from milp_planner.deploy.manifest import Manifest
from milp_planner.deploy.runtime import execute_sequential, make_inputs, max_abs_err, reference_outputs


def run_deployment(out_dir, input=None, repeat: int = 5, check: bool = False, emulate_network: bool = False,
                   timeout: float = 120.0, memory_budget: int | None = None) -> dict:
    """Run the deployment in ``out_dir`` with one MPI rank per device (see ``launcher.run_deployment``)."""
    from milp_planner.deploy.launcher import run_deployment as run

    return run(out_dir, input=input, repeat=repeat, check=check, emulate_network=emulate_network, timeout=timeout,
               memory_budget=memory_budget)


__all__ = ["deploy", "run_deployment", "execute_sequential", "make_inputs", "max_abs_err", "reference_outputs",
           "Manifest"]
