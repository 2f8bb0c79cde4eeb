"""ResourceClaim (DRA) labels under the DCGM profile, as dcgm-exporter's --kubernetes-enable-dra writes them."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.model.kubernetes import DraClaim, GpuPod, KubernetesAttribution, PodResourcesReading
from test_unit_dcgm import samples
from test_unit_dcgm_mig_pods import FIELDS, GI2, GI9, MIG_GPU, TAIL, WHOLE, WHOLE_GPU, snapshot

PINNED = Generation.V4_8  # these tests read generation 4.8's names and units; the default is the newest
WHOLE_UUID = WHOLE_GPU.removeprefix("GPU-")
MIG_UUID = MIG_GPU.removeprefix("GPU-")


def claim(uuid: str, pod: str, container: str = "main", name: str = "gpu-claim", device: str = "gpu-1") -> DraClaim:
    return DraClaim(uuid, "ml", pod, container, "ml", name, "gpu.nvidia.com", "node-1", device)


def attribution(*claims: DraClaim, gpu_pods: tuple[GpuPod, ...] = ()) -> KubernetesAttribution:
    return KubernetesAttribution(PodResourcesReading(True), gpu_pods=gpu_pods, claims=claims)


def dra(name: str = "gpu-claim", device: str = "gpu-1") -> str:
    return (
        f'dra_claim_name="{name}",dra_claim_namespace="ml",dra_driver_name="gpu.nvidia.com",'
        f'dra_pool_name="node-1",dra_device_name="{device}"'
    )


def temperatures(kubernetes: KubernetesAttribution, *, dra_claims: bool = True, pod_labels: bool = False) -> list[str]:
    text = DcgmExposition(
        FIELDS, "node-1", pod_labels=pod_labels, dra_claims=dra_claims, xids=False, generation=PINNED
    ).render(snapshot(kubernetes=kubernetes))
    return [line for line in samples(text) if line.startswith("DCGM_FI_DEV_GPU_TEMP")]


def test_a_claimed_gpus_series_name_the_claiming_pod_and_its_claim() -> None:
    assert temperatures(attribution(claim(WHOLE_UUID, "trainer"))) == [
        f"DCGM_FI_DEV_GPU_TEMP{{{GI2}}} 36",
        f"DCGM_FI_DEV_GPU_TEMP{{{GI9}}} 36",
        f'DCGM_FI_DEV_GPU_TEMP{{{WHOLE},pod="trainer",namespace="ml",container="main",{dra()}}} 30',
    ]


def test_each_claiming_container_gets_a_copy_and_a_containers_second_claim_none() -> None:
    """dcgm-exporter keeps one claim per pod, namespace and container of a GPU, the first it reads."""
    lines = temperatures(
        attribution(
            claim(WHOLE_UUID, "a"),
            claim(WHOLE_UUID, "a", name="second"),
            claim(WHOLE_UUID, "b", container="sidecar", name="shared"),
        )
    )
    assert lines[2:] == [
        f'DCGM_FI_DEV_GPU_TEMP{{{WHOLE},pod="a",namespace="ml",container="main",{dra()}}} 30',
        f'DCGM_FI_DEV_GPU_TEMP{{{WHOLE},pod="b",namespace="ml",container="sidecar",{dra("shared")}}} 30',
    ]


def test_a_claim_on_a_mig_gpu_labels_each_of_its_gpu_instances() -> None:
    """dcgm-exporter keys claims by the parent GPU; a claim whose MIG device no GPU instance read is at has no MIG
    profile or MIG uuid labels (tests/test_dcgm_dra_mig.py has those)."""
    device = "gpu-0-mig-9-0-1"
    labels = f'pod="infer",namespace="ml",container="main",{dra(device=device)}'
    assert temperatures(attribution(claim(MIG_UUID, "infer", device=device)))[:2] == [
        f"DCGM_FI_DEV_GPU_TEMP{{{GI2},{labels}}} 36",
        f"DCGM_FI_DEV_GPU_TEMP{{{GI9},{labels}}} 36",
    ]


@pytest.mark.parametrize(
    ("claims", "dra_claims"),
    [
        ((claim(WHOLE_UUID, "trainer"),), False),  # the flag off
        ((claim("", "trainer"),), True),  # a device placed on no GPU read
        ((), True),
    ],
)
def test_without_a_placed_claim_the_series_stay_the_gpus(claims: tuple[DraClaim, ...], dra_claims: bool) -> None:
    assert temperatures(attribution(*claims), dra_claims=dra_claims)[2] == f"DCGM_FI_DEV_GPU_TEMP{{{WHOLE}}} 30"


def test_the_claim_names_the_gpu_where_the_device_plugin_holder_would() -> None:
    holder = GpuPod(WHOLE_UUID, "", "ml", "plugin-pod", "c", "nvidia.com/gpu", WHOLE_GPU)
    lines = temperatures(attribution(claim(WHOLE_UUID, "trainer"), gpu_pods=(holder,)), pod_labels=True)
    assert lines[2] == f'DCGM_FI_DEV_GPU_TEMP{{{WHOLE},pod="trainer",namespace="ml",container="main",{dra()}}} 30'
    assert TAIL in lines[2]


@pytest.mark.parametrize(
    ("argv", "env", "claims"),
    [
        (["-k", "--kubernetes-enable-dra"], {}, True),
        (["-k"], {"KUBERNETES_ENABLE_DRA": "true"}, True),
        (["--kubernetes-enable-dra"], {}, False),  # without -k, as dcgm-exporter: its pod mapper reads claims
    ],
)
def test_dcgm_exporters_dra_option_turns_on_the_claims(argv: list[str], env: dict[str, str], claims: bool) -> None:
    if "-k" in argv:
        pytest.importorskip("grpc", reason="-k needs the 'kubernetes' extra (grpcio) for the kubelet's API")
    parsed = parse_args(argv, env)
    assert parsed.config.kubernetes_dra_claims is claims
    assert [notice.why for notice in parsed.notices] == (
        [] if claims else ["no DRA labels without --kubernetes (-k), as in dcgm-exporter"]
    )
