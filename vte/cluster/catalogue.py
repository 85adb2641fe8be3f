"""Constants of the cluster model: resources, tiers, labels, GPU models, node kinds and
workload archetypes, with the figures of MODEL.md (see docs in `vte/cluster/MODEL.md`).

Everything here is a plain Python / NumPy constant; the sampling code in
`vte.cluster.scenario` turns the tables into arrays once, at trace time.
"""

import numpy as np

# Resources: columns of every capacity / demand array `[..., NUM_RESOURCES]`.
CPU, MEM, GPU, DISK = 0, 1, 2, 3
RESOURCES = ("cpu_cores", "memory_gib", "gpus", "disk_gib")
NUM_RESOURCES = len(RESOURCES)

# Tiers.
CLOUD, EDGE, HPC = 0, 1, 2
TIERS = ("cloud", "edge", "hpc")

# GPU models: index 0 is "no GPU". A request names the models it accepts as a bitmask
# (bit m set = model m accepted).
GPU_MODELS = ("none", "T4", "A100", "H100")
NUM_GPU_MODELS = len(GPU_MODELS)
# Throughput relative to an A100 (the reference GPU a gpu_job's work is measured on).
GPU_SPEED = np.array([1.0, 0.3, 1.0, 2.0], np.float32)
# Board power at full load, watts (T4 70 W, A100 400 W, H100 SXM 700 W).
GPU_WATTS = np.array([0.0, 70.0, 400.0, 700.0], np.float32)

# Labels: bit positions in a node's `labels` bitmask and in requests' label sets.
LABELS = ("cloud", "edge", "hpc", "gpu", "bigmem", "arm64", "ssd", "highnet")
NUM_LABELS = len(LABELS)
L_CLOUD, L_EDGE, L_HPC, L_GPU, L_BIGMEM, L_ARM64, L_SSD, L_HIGHNET = (1 << i for i in range(NUM_LABELS))
BIGMEM_GIB = 384.0        # a node with at least this much memory carries "bigmem"
HIGHNET_MBPS = 10000.0    # a node with at least this bandwidth carries "highnet"

# --------------------------------------------------------------------------
# Node kinds. A node's tier is drawn from `tier_shares`; a cloud or HPC node carries GPUs
# with probability `gpu_node_share`. Ranges are [lo, hi]; * = log-uniform.
# --------------------------------------------------------------------------
NODE_KINDS = ("cloud_cpu", "cloud_gpu", "hpc_cpu", "hpc_gpu", "edge")
#                      cloud_cpu cloud_gpu hpc_cpu hpc_gpu  edge
KIND_TIER = np.array([CLOUD, CLOUD, HPC, HPC, EDGE], np.int32)
KIND_CORES = np.array([[16, 64], [32, 96], [32, 96], [32, 96], [2, 8]], np.float32)
KIND_MEM_GIB = np.array([[64, 256], [128, 512], [128, 512], [256, 1024], [8, 32]], np.float32)  # *
KIND_GPUS = np.array([[0, 0], [1, 8], [0, 0], [4, 8], [0, 0]], np.float32)
# Probability of each GPU model given the node has GPUs: (none, T4, A100, H100).
KIND_GPU_MODEL_P = np.array([[1, 0, 0, 0], [0, 0.4, 0.6, 0], [1, 0, 0, 0], [0, 0, 0.4, 0.6],
                             [1, 0, 0, 0]], np.float32)
KIND_SPEED = np.array([[0.9, 1.1], [0.9, 1.1], [1.2, 1.5], [1.2, 1.5], [0.3, 0.6]], np.float32)
# Power of the host (CPU, memory, board), watts: idle and at 100 % CPU. GPUs add GPU_WATTS each.
# Rack servers: 58 W idle / 222 W peak (SPECpower x3550); edge: Raspberry Pi 4 2.7 / 6.4 W,
# small x86 and Jetson-class boxes 7-25 W.
KIND_IDLE_W = np.array([[50, 100], [100, 200], [80, 150], [150, 300], [2, 10]], np.float32)
KIND_PEAK_W = np.array([[200, 350], [300, 500], [300, 500], [400, 600], [6, 25]], np.float32)
KIND_BANDWIDTH_MBPS = np.array([[1000, 10000], [10000, 40000], [10000, 40000], [10000, 40000],
                                [100, 1000]], np.float32)  # *
KIND_DISK_GIB = np.array([[200, 2000], [500, 4000], [500, 4000], [1000, 4000], [32, 256]],
                         np.float32)  # *
# Failures per hour (1 / MTBF) before `failure_rate_scale`; edge devices fail most.
KIND_FAILURE_RATE = np.array([0.002, 0.003, 0.001, 0.0015, 0.02], np.float32)
KIND_P_SSD = np.array([0.7, 0.9, 0.5, 0.9, 0.3], np.float32)
KIND_P_ARM = np.array([0.0, 0.0, 0.0, 0.0, 0.5], np.float32)

# Background CPU load profiles: (low, medium, high) ranges of the long-run mean, fraction.
LOAD_LEVELS = np.array([[0.05, 0.25], [0.25, 0.65], [0.65, 0.95]], np.float32)
MEM_BG_RATIO = 0.6        # background memory utilisation = MEM_BG_RATIO * background CPU load
BG_MAX = 0.98             # background load never exceeds this fraction
DAILY_AMPLITUDE = 0.3     # relative swing of the daily background-load profile

# --------------------------------------------------------------------------
# Workload archetypes (MODEL.md table). Ranges are [lo, hi]; * = log-uniform.
# --------------------------------------------------------------------------
ARCHETYPES = ("cpu_heavy", "mem_heavy", "gpu_job", "small_short", "balanced")
#                          cpu_heavy  mem_heavy   gpu_job    small   balanced
ARCH_CORES = np.array([[8, 64], [2, 16], [4, 32], [1, 2], [2, 8]], np.float32)
ARCH_MEM_GIB = np.array([[4, 32], [64, 256], [16, 128], [1, 4], [8, 64]], np.float32)  # *
ARCH_GPUS = np.array([[0, 0], [0, 0], [1, 4], [0, 0], [1, 1]], np.float32)
ARCH_P_GPU = np.array([0.0, 0.0, 1.0, 0.0, 0.3], np.float32)   # probability the request wants GPUs
# Accepted GPU models (bitmask over GPU_MODELS) and the alternative taken with ARCH_P_GPU_ALT.
_B = [1 << i for i in range(NUM_GPU_MODELS)]
ARCH_GPU_MASK = np.array([0, 0, _B[2] | _B[3], 0, _B[1] | _B[2]], np.int32)
ARCH_GPU_MASK_ALT = np.array([0, 0, _B[3], 0, _B[1]], np.int32)
ARCH_P_GPU_ALT = np.array([0.0, 0.0, 0.3, 0.0, 0.5], np.float32)
ARCH_SECONDS = np.array([[1800, 14400], [3600, 28800], [1800, 10800], [300, 1800],
                         [3600, 14400]], np.float32)   # work on a reference node, s
ARCH_DATA_GB = np.array([[1, 50], [5, 100], [10, 200], [0.01, 1], [1, 20]], np.float32)  # *
# Placement policy: probability of each label in the preferred / required / rejected sets.
ARCH_P_PREFER = np.array([
    # cloud edge  hpc  gpu  bigmem arm  ssd  highnet
    [0.0, 0.0, 0.7, 0.0, 0.0, 0.0, 0.3, 0.3],   # cpu_heavy
    [0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.5, 0.0],   # mem_heavy
    [0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 0.3, 0.5],   # gpu_job
    [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],   # small_short
    [0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0],   # balanced
], np.float32)
ARCH_P_REQUIRE = np.array([
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.0],
], np.float32)
ARCH_P_REJECT = np.array([
    [0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
    [0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.3, 0.0, 0.2, 0.0, 0.0],
    [0.0, 0.3, 0.0, 0.0, 0.0, 0.7, 0.0, 0.0],
], np.float32)
# Latency bound from the origin site, ms: drawn with probability ARCH_P_LATENCY, else none.
ARCH_P_LATENCY = np.array([0.0, 0.0, 0.0, 0.6, 0.2], np.float32)
ARCH_LATENCY_MS = np.array([[0, 0], [0, 0], [0, 0], [5, 40], [20, 80]], np.float32)
NO_LATENCY_BOUND_MS = 1e6  # the bound of a request without one

# --------------------------------------------------------------------------
# Sites and links.
# --------------------------------------------------------------------------
INTRA_SITE_DELAY_MS = 0.2
LINK_BASE_DELAY_MS = 2.0
LINK_DELAY_MS_PER_UNIT = 60.0  # sites sit in a unit square; delay grows with distance

# --------------------------------------------------------------------------
# Arrivals and scoring scales.
# --------------------------------------------------------------------------
MAX_ARRIVALS = 4              # arrivals per step ~ Binomial(MAX_ARRIVALS, arrival_rate / 4)
# The three normalisers are set so that, with the default scenarios, the three terms vary
# about as much between the feasible nodes of a state (median within-state std about 0.25
# each): equal weights then mean equal say.
REF_WATTS_PER_CORE = 20.0     # energy normaliser: a reference job draws 20 W per core
REF_WATTS_PER_GPU = 600.0     # ... and 600 W per GPU
RELIABILITY_REF = 0.01        # failure probability that scores 1 on the reliability term
MBIT_PER_GB = 8000.0
