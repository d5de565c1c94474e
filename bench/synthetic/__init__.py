"""A large, realistic, deterministic cluster for benchmarks: nodes, pods, VMs, VMIs, operator CRs.

At ``scale=1.0``: 5,000 nodes (1,000 GPU nodes in container mode with GFD labels, 200 of them MIG;
300 vm-passthrough nodes advertising sandbox resources; a few NotReady with unreachable taints;
about 18 KB each with ~30 images in status), 150,000 pods (20,000 holding ``nvidia.com/gpu`` or
MIG slices on the GPU nodes; daemonset, GPU Operator operand, virt-launcher and deployment pods of
3-5 KB), 10,000 VirtualMachines (half with gpus/hostDevices), 10,000 VMIs, one KubeVirt CR, one
ClusterPolicy and a NodeFeature per GPU node. ``scale`` multiplies every count.

The DRA cluster (``DraLayout``, ``dra=True``, ``--dra``): 5,000 nodes whose 8 GPUs each NVIDIA's
DRA driver publishes in ResourceSlices (full GPUs, MIG devices, vfio passthrough devices), the
driver's three DeviceClasses, 20,000 ResourceClaims (most allocated, reserved for pods that
exist), their templates, and 10,000 VMs taking their GPU from a claim (``dra_layout.py``,
``dra_plan.py``).

The same (scale, seed) gives the same objects, byte for byte, whatever order the kinds are read in:
each kind draws from its own random stream, and every placement comes from ``Layout``. The
compact form (``compact=True``, ``--compact``) is the same cluster with only the fields gpu-guard
reads (``compact.py``): ~70 MB instead of 849 MB at scale 1.0, the same ClusterState.

    python -m bench.synthetic -o /tmp/big.json [--scale 1.0] [--seed 7] [--format json|yaml]
    python -m bench.synthetic -o /tmp/big.json --compact [--if-missing]
    python -m bench.synthetic --verify-compact [--verify-scale 0.02] [--dra]
    python -m bench.synthetic -o /tmp/dra.json --dra [--compact] [--scale 1.0]
"""

from bench.synthetic.dra_layout import DraLayout
from bench.synthetic.dra_plan import dra_plan
from bench.synthetic.layout import DEFAULT_SEED, Layout
from bench.synthetic.nodes import node_features, nodes
from bench.synthetic.operators import cluster_policies, kubevirts
from bench.synthetic.pods import pods
from bench.synthetic.vms import virtual_machine_instances, virtual_machines
from bench.synthetic.write import DRA_KINDS, GENERATORS, KINDS, cluster, dra_cluster, write_list

__all__ = [
    "DEFAULT_SEED",
    "DRA_KINDS",
    "GENERATORS",
    "KINDS",
    "DraLayout",
    "Layout",
    "cluster",
    "cluster_policies",
    "dra_cluster",
    "dra_plan",
    "kubevirts",
    "node_features",
    "nodes",
    "pods",
    "virtual_machine_instances",
    "virtual_machines",
    "write_list",
]
