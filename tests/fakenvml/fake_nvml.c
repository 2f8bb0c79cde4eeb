/*
 * A fake libnvidia-ml.so.1 for the exporter's tests: the real nvidia-ml-py bindings load it (through
 * LD_LIBRARY_PATH, or in-process by assigning pynvml.nvmlLib) and call the same C entry points they call
 * on a real driver, so the whole path from ctypes structs to exposition is exercised without a GPU.
 *
 * Written from the ctypes declarations of nvidia-ml-py; no NVIDIA header is used. Struct layouts match
 * nvidia-ml-py's (fakeNvmlSizeof lets a test check that they still do after a bindings upgrade).
 *
 * Scenario: FAKE_NVML_SCENARIO (h200 | rtx | mig | unsupported | noperm | lost | zero | xidstorm | legacy),
 * FAKE_NVML_GPUS replicates GPU 0 of the scenario N times. Run-time control: the commands of README.md,
 * given in-process through fakeNvmlCommand() or appended as lines to the file named by FAKE_NVML_CONTROL
 * (re-read whenever the exporter asks for the device count or waits for events).
 *
 * Build: cc -shared -fPIC -O2 -Wall -Wextra -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_UNKNOWN = 999,
};

/* Overridable at compile time (-DMAX_TOP=256 -DMAX_DEVICES=512): benchmarks/bench_footprint.py scales to 256. */
#ifndef MAX_DEVICES
#define MAX_DEVICES 80
#endif
#ifndef MAX_TOP
#define MAX_TOP 32
#endif
#define MAX_MIG_SLOTS 8
#ifndef MAX_PROCS
#define MAX_PROCS 32
#endif
#ifndef MAX_NAMES
#define MAX_NAMES 128
#endif
#define MAX_EVENTS 8192
#define MAX_FIELD_RC 64
#define NA_U64 0xFFFFFFFFFFFFFFFFULL
#define NO_INSTANCE 0xFFFFFFFFu
#define DEVICE_MAGIC 0x6e766d6cu
#define SAMPLE_MAGIC 0x67706d73u
#define GPM_WHOLE_GPU 0xFFFFFFFEu /* a sample's gi when nvmlGpmSampleGet took it of the whole GPU */
#define SET_MAGIC 0x65767473u
#define MIB 1048576ULL

/* ---- every entry point, for call counting, return-code and delay injection ---------------------- */
#define FAKE_FUNCTIONS(X)                                                                                    \
    X(nvmlInit_v2) X(nvmlInitWithFlags) X(nvmlShutdown) X(nvmlSystemGetDriverVersion)                      \
    X(nvmlSystemGetCudaDriverVersion) X(nvmlSystemGetProcessName) X(nvmlDeviceGetCount_v2)                 \
    X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetName) X(nvmlDeviceGetSerial) X(nvmlDeviceGetUUID)      \
    X(nvmlDeviceGetIndex) X(nvmlDeviceGetVbiosVersion) X(nvmlDeviceGetInforomImageVersion)                 \
    X(nvmlDeviceGetInforomVersion) X(nvmlDeviceValidateInforom) X(nvmlDeviceGetHostname_v1)                \
    X(nvmlDeviceGetPciInfoExt) X(nvmlDeviceGetCurrPcieLinkGeneration) X(nvmlDeviceGetMaxPcieLinkGeneration) \
    X(nvmlDeviceGetGpuMaxPcieLinkGeneration) X(nvmlDeviceGetCurrPcieLinkWidth)                             \
    X(nvmlDeviceGetMaxPcieLinkWidth) X(nvmlDeviceGetDisplayMode) X(nvmlDeviceGetDisplayActive)             \
    X(nvmlDeviceGetPersistenceMode) X(nvmlDeviceGetAccountingMode) X(nvmlDeviceGetEccMode)                 \
    X(nvmlDeviceGetAddressingMode) X(nvmlDeviceGetAccountingBufferSize) X(nvmlDeviceGetDriverModel_v2)     \
    X(nvmlDeviceGetGpuOperationMode) X(nvmlDeviceGetFanSpeed) X(nvmlDeviceGetUtilizationRates)             \
    X(nvmlDeviceGetEncoderUtilization) X(nvmlDeviceGetDecoderUtilization) X(nvmlDeviceGetJpgUtilization)   \
    X(nvmlDeviceGetOfaUtilization) X(nvmlDeviceGetPerformanceState)                                        \
    X(nvmlDeviceGetSupportedClocksEventReasons) X(nvmlDeviceGetCurrentClocksEventReasons)                  \
    X(nvmlDeviceGetFieldValues) X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2)                   \
    X(nvmlDeviceGetConfComputeProtectedMemoryUsage) X(nvmlDeviceGetComputeMode)                            \
    X(nvmlDeviceGetCudaComputeCapability) X(nvmlDeviceGetEncoderStats) X(nvmlDeviceGetDramEncryptionMode)  \
    X(nvmlDeviceGetMemoryErrorCounter) X(nvmlDeviceGetTotalEccErrors) X(nvmlDeviceGetSramEccErrorStatus)   \
    X(nvmlDeviceGetRetiredPages) X(nvmlDeviceGetRetiredPagesPendingStatus) X(nvmlDeviceGetRemappedRows)    \
    X(nvmlDeviceGetRemappedRows_v2) X(nvmlDeviceGetRowRemapperHistogram) X(nvmlDeviceGetTemperatureV)      \
    X(nvmlDeviceGetTemperature) X(nvmlDeviceGetMarginTemperature) X(nvmlDeviceGetPowerUsage)               \
    X(nvmlDeviceGetPowerManagementLimit) X(nvmlDeviceGetEnforcedPowerLimit)                                \
    X(nvmlDeviceGetPowerManagementDefaultLimit) X(nvmlDeviceGetPowerManagementLimitConstraints)            \
    X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetMaxClockInfo) X(nvmlDeviceGetMigMode)                         \
    X(nvmlDeviceGetGspFirmwareMode) X(nvmlDeviceGetC2cModeInfoV) X(nvmlDeviceGetGpuFabricInfoV)            \
    X(nvmlDeviceGetPlatformInfo) X(nvmlDeviceGetTotalEnergyConsumption) X(nvmlDeviceGetPcieThroughput)     \
    X(nvmlDeviceGetPcieReplayCounter) X(nvmlDeviceGetP2PStatus) X(nvmlDeviceGetNvLinkState)                \
    X(nvmlDeviceGetNvLinkErrorCounter)                                                                     \
    X(nvmlDeviceGetComputeRunningProcesses_v3) X(nvmlDeviceGetMPSComputeRunningProcesses_v3)               \
    X(nvmlDeviceGetProcessUtilization)                                                                     \
    X(nvmlDeviceGetMaxMigDeviceCount)                                                                      \
    X(nvmlDeviceGetMigDeviceHandleByIndex) X(nvmlDeviceGetGpuInstanceId) X(nvmlDeviceGetComputeInstanceId) \
    X(nvmlDeviceGetGpuInstanceById) X(nvmlGpuInstanceGetInfo)                                              \
    X(nvmlGpmQueryDeviceSupport) X(nvmlGpmSampleAlloc) X(nvmlGpmSampleFree) X(nvmlGpmMigSampleGet)         \
    X(nvmlGpmSampleGet) X(nvmlGpmMetricsGet) X(nvmlEventSetCreate) X(nvmlDeviceRegisterEvents) X(nvmlEventSetWait_v2)          \
    X(nvmlEventSetFree)

#define AS_ENUM(name) FN_##name,
#define AS_NAME(name) #name,
enum { FAKE_FUNCTIONS(AS_ENUM) FN_COUNT };
static const char *const FN_NAMES[FN_COUNT] = {FAKE_FUNCTIONS(AS_NAME)};

/* ---- per-device readings: one X-macro list drives the struct and the "set" command --------------- */
#define NUMERIC_FIELDS(X)                                                                                    \
    X(pci_domain) X(pci_bus) X(pci_device) X(pci_device_id) X(pci_subsys_id) X(pci_base_class)             \
    X(pci_sub_class) X(pcie_gen_cur) X(pcie_gen_max) X(pcie_gen_gpumax) X(pcie_width_cur)                  \
    X(pcie_width_max) X(display_mode) X(display_active) X(persistence) X(accounting) X(accounting_buffer)  \
    X(ecc_cur) X(ecc_pend) X(addressing) X(driver_model_cur) X(driver_model_pend) X(gom_cur) X(gom_pend)   \
    X(fan) X(util_gpu) X(util_mem) X(util_enc) X(util_dec) X(util_jpg) X(util_ofa) X(pstate)               \
    X(reasons_supported) X(reasons_active) X(fv_sw_power_cap) X(fv_sync_boost) X(fv_sw_thermal)            \
    X(fv_hw_thermal) X(fv_hw_power_brake) X(power_avg_mw) X(power_inst_mw) X(mem_temp) X(recovery_action)  \
    X(edpp) X(mem_total) X(mem_reserved) X(mem_used) X(mem_free) X(prot_total) X(prot_used) X(prot_free)   \
    X(compute_mode) X(cc_major) X(cc_minor) X(enc_sessions) X(enc_fps) X(enc_latency) X(dram_enc_cur)      \
    X(dram_enc_pend) X(ecc_loc_mask) X(ecc_base) X(sram_agg_unc_parity) X(sram_agg_unc_secded)             \
    X(sram_agg_cor) X(sram_vol_unc_parity) X(sram_vol_unc_secded) X(sram_vol_cor) X(sram_l2) X(sram_sm)    \
    X(sram_pcie) X(sram_mcu) X(sram_other) X(sram_threshold) X(retired_sbe) X(retired_dbe)                 \
    X(retired_pending) X(remap_corr) X(remap_unc) X(remap_pending) X(remap_failure) X(remap_corr_inactive) \
    X(remap_unc_inactive) X(hist_max) X(hist_high) X(hist_partial) X(hist_low) X(hist_none) X(temp_gpu)    \
    X(temp_margin) X(power_mw) X(power_limit) X(enforced_limit) X(default_limit) X(min_limit)              \
    X(max_limit) X(clk_graphics) X(clk_sm) X(clk_mem) X(clk_video) X(max_graphics) X(max_sm) X(max_mem)    \
    X(max_video) X(mig_cur) X(mig_pend) X(gsp_cur) X(gsp_default) X(c2c) X(fabric_state)                   \
    X(fabric_status) X(fabric_clique) X(fabric_cluster_hi) X(fabric_cluster_lo) X(plat_slot)               \
    X(plat_tray) X(plat_host) X(plat_peer) X(plat_module) X(plat_guid) X(energy_mj) X(pcie_tx_kb)          \
    X(pcie_rx_kb) X(gpm_supported) X(max_mig) X(xid_supported) X(gi_id) X(ci_id) X(pcie_replay)              \
    X(nvlink_raw_tx_kib) X(nvlink_raw_rx_kib) X(nvlink_data_tx_kib) X(nvlink_data_rx_kib) X(fv_thermal)      \
    X(fv_board_limit) X(fv_low_util) X(fv_reliability) X(nvlink_crc_flit) X(nvlink_crc_data)                \
    X(nvlink_replay) X(nvlink_recovery) X(fabric_health_mask) X(fabric_health_summary) X(fabric_v2_only) X(gi_profile) X(placement_start)  \
    X(placement_size) X(nvlink_l0_tx_kib) X(nvlink_l0_rx_kib) X(nvlinks)

#define DOUBLE_FIELDS(X) X(gpm_graphics) X(gpm_sm) X(gpm_occupancy) X(gpm_tensor) X(gpm_tx) X(gpm_rx) X(gpm_dram)

#define STRING_FIELDS(X)                                                                                     \
    X(name, 96) X(serial, 30) X(uuid, 96) X(vbios, 32) X(inforom_img, 16) X(inforom_oem, 16)               \
    X(inforom_ecc, 16) X(inforom_pwr, 16) X(bus_id, 32) X(hostname, 64) X(chassis_serial, 16)

#define AS_NUMERIC_MEMBER(name) long long name;
#define AS_DOUBLE_MEMBER(name) double name;
#define AS_STRING_MEMBER(name, size) char name[size];

typedef struct {
    unsigned pid;
    unsigned long long memory;
    unsigned gi, ci;
    int mps; /* an MPS client: listed by nvmlDeviceGetMPSComputeRunningProcesses_v3, not the compute list */
} FakeProcess;

/* A per-process utilization sample as nvmlDeviceGetProcessUtilization returns it (timestamp: CPU time in µs). */
typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct FakeDevice {
    unsigned magic;
    int parent; /* -1 for a physical GPU, else the index (in g_devs) of the parent of this MIG device */
    int top_index;
    int lost;
    int slots[MAX_MIG_SLOTS]; /* MIG children (g_devs indices), -1 = empty */
    int nprocs;
    FakeProcess procs[MAX_PROCS];
    int nsamples;
    int sample_pad; /* zero-filled entries past the real samples, as some drivers return (a sizing count of 100) */
    nvmlProcessUtilizationSample_t samples[MAX_PROCS];
    NUMERIC_FIELDS(AS_NUMERIC_MEMBER)
    DOUBLE_FIELDS(AS_DOUBLE_MEMBER)
    STRING_FIELDS(AS_STRING_MEMBER)
} FakeDevice;

typedef struct FakeDevice *nvmlDevice_t;
/* A GPU instance handle: the first MIG device of the instance (its readings carry the instance's placement). */
typedef struct FakeDevice *nvmlGpuInstance_t;
typedef struct {
    unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
    nvmlDevice_t device;
    unsigned int id, profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

/* ---- structs as nvidia-ml-py declares them ------------------------------------------------------ */
typedef struct {
    unsigned int version, domain, bus, device, pciDeviceId, pciSubSystemId, baseClass, subClass;
    char busId[32];
} nvmlPciInfoExt_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned int version, sensorType;
    int temperature;
} nvmlTemperature_v1_t;
typedef struct {
    unsigned int version;
    int marginTemperature;
} nvmlMarginTemperature_t;
typedef struct {
    unsigned int version, value;
} nvmlVersionedValue_t; /* addressing mode, DRAM encryption */
typedef struct {
    unsigned int version;
    unsigned long long aggregateUncParity, aggregateUncSecDed, aggregateCor, volatileUncParity,
        volatileUncSecDed, volatileCor, aggregateUncBucketL2, aggregateUncBucketSm, aggregateUncBucketPcie,
        aggregateUncBucketMcu, aggregateUncBucketOther;
    unsigned int bThresholdExceeded;
} nvmlEccSramErrorStatus_t;
typedef struct {
    unsigned int corrActiveRemaps, corrInactiveRemaps, uncActiveRemaps, uncInactiveRemaps, bPending,
        bFailureOccurred;
} nvmlRemappedRowsInfo_v2_t;
typedef struct {
    unsigned int max, high, partial, low, none;
} nvmlRowRemapperHistogramValues_t;
typedef struct {
    unsigned int isC2cEnabled;
} nvmlC2cModeInfo_t;
typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    unsigned int status, cliqueId, state, healthMask;
    unsigned char healthSummary; /* v3 only */
} nvmlGpuFabricInfo_t;
typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber, trayIndex, hostId, peerType, moduleId;
} nvmlPlatformInfo_t;
typedef struct {
    char value[64];
} nvmlHostname_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned int valueType;
    int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;
typedef struct FakeEventSet {
    unsigned magic;
    int registered[MAX_DEVICES];
} FakeEventSet;
typedef FakeEventSet *nvmlEventSet_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct FakeGpmSample {
    unsigned magic;
    int device;
    unsigned int gi;
    long long taken_ns;
} FakeGpmSample;
typedef FakeGpmSample *nvmlGpmSample_t;
typedef struct {
    unsigned int version, isSupportedDevice;
} nvmlGpmSupport_t;
typedef struct {
    unsigned int metricId;
    int nvmlReturn;
    double value;
    const char *shortName, *longName, *unit;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[477];
} nvmlGpmMetricsGet_t;

#define VERSIONED(type, v) ((unsigned)(sizeof(type) | ((v) << 24)))
#define MEMORY_V2_VERSION VERSIONED(nvmlMemory_v2_t, 2u)
#define PCI_EXT_VERSION VERSIONED(nvmlPciInfoExt_t, 1u)
#define TEMPERATURE_V1_VERSION VERSIONED(nvmlTemperature_v1_t, 1u)
#define MARGIN_V1_VERSION VERSIONED(nvmlMarginTemperature_t, 1u)
#define VALUE_V1_VERSION VERSIONED(nvmlVersionedValue_t, 1u)
#define SRAM_V1_VERSION VERSIONED(nvmlEccSramErrorStatus_t, 1u)
#define FABRIC_V2_VERSION (36u | (2u << 24))
#define FABRIC_V3_VERSION (40u | (3u << 24))
#define PLATFORM_V1_VERSION (44u | (1u << 24))
#define PLATFORM_V2_VERSION (44u | (2u << 24))

/* ---- global state, all under g_lock ------------------------------------------------------------- */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_events_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static FakeDevice g_devs[MAX_DEVICES];
static int g_ndevs;
static int g_top[MAX_TOP];
static int g_ntop;
static int g_visible; /* what nvmlDeviceGetCount_v2 reports */
static int g_refcount;
static char g_driver[80];
static int g_cuda;
static char g_scenario[32];
static int g_rc_all[FN_COUNT];
static int g_rc_dev[FN_COUNT][MAX_DEVICES];
static int g_delay_ms[FN_COUNT];
static unsigned long g_calls[FN_COUNT];
static unsigned long g_cycles; /* nvmlSystemGetCudaDriverVersion calls: the exporter reads it once a cycle */
static int g_lost_from, g_lost_until, g_lost_gpu; /* scripted loss during cycles [from, until] */
static int g_storm_pending;
/* nvmlDeviceGetP2PStatus per (GPU, peer GPU, nvmlGpuP2PCapsIndex_t): nvmlGpuP2PStatus_t, 0 (OK) after a reset */
#define P2P_CAPS 5
static int g_p2p[MAX_TOP][MAX_TOP][P2P_CAPS];
static struct {
    int device; /* -1 = every device */
    unsigned field;
    int rc;
} g_field_rc[MAX_FIELD_RC];
static int g_nfield_rc;
static int g_gpm_rc[512];
static struct {
    unsigned pid;
    char name[256];
} g_names[MAX_NAMES];
static int g_nnames;
static struct {
    int device;
    unsigned long long xid;
} g_events[MAX_EVENTS];
static int g_event_head, g_event_count;
static char g_control_path[1024];
static long g_control_offset;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void copy_string(char *dst, size_t size, const char *src) {
    size_t n = strnlen(src, size - 1);
    memmove(dst, src, n);
    dst[n] = 0;
}

/* ---- scenarios -------------------------------------------------------------------------------- */
static int rc_for(int fn, int dev) {
    if (dev >= 0 && dev < MAX_DEVICES && g_rc_dev[fn][dev]) return g_rc_dev[fn][dev];
    return g_rc_all[fn];
}

static int function_id(const char *name) {
    for (int i = 0; i < FN_COUNT; i++)
        if (strcmp(FN_NAMES[i], name) == 0) return i;
    return -1;
}

static void unsupported(int top, int fn) {
    g_rc_dev[fn][g_top[top]] = NVML_ERROR_NOT_SUPPORTED;
}

static void add_process(int top, unsigned pid, unsigned long long memory, unsigned gi, unsigned ci) {
    FakeDevice *d = &g_devs[g_top[top]];
    if (d->nprocs < MAX_PROCS) d->procs[d->nprocs++] = (FakeProcess){pid, memory, gi, ci, 0};
}

static void set_process_name(unsigned pid, const char *name) {
    for (int i = 0; i < g_nnames; i++)
        if (g_names[i].pid == pid) {
            copy_string(g_names[i].name, sizeof g_names[i].name, name);
            return;
        }
    if (g_nnames < MAX_NAMES) {
        g_names[g_nnames].pid = pid;
        copy_string(g_names[g_nnames].name, sizeof g_names[g_nnames].name, name);
        g_nnames++;
    }
}

/* A deterministic uuid per (kind, number), lowercase hex as drivers print it. */
static void make_uuid(char *out, size_t size, const char *prefix, unsigned a, unsigned b) {
    unsigned x = 0x9e3779b9u * (a + 1) ^ (0x85ebca6bu * (b + 7));
    snprintf(out, size, "%s%08x-%04x-%04x-%04x-%04x%08x", prefix, x, (a * 0x1111u) & 0xffff, 0x4000 | (b & 0xfff),
             0x8000 | ((a + b) & 0x3fff), (x >> 16) & 0xffff, x ^ 0xdeadbeefu);
}

static int new_device(void) {
    int k = g_ndevs++;
    FakeDevice *d = &g_devs[k];
    memset(d, 0, sizeof *d);
    d->magic = DEVICE_MAGIC;
    d->parent = -1;
    d->top_index = -1;
    for (int i = 0; i < MAX_MIG_SLOTS; i++) d->slots[i] = -1;
    d->gi_id = NO_INSTANCE;
    d->ci_id = NO_INSTANCE;
    return k;
}

static void h200_values(FakeDevice *d, int i) {
    copy_string(d->name, sizeof d->name, "NVIDIA H200");
    snprintf(d->serial, sizeof d->serial, "16501240%05d", 1 + i);
    make_uuid(d->uuid, sizeof d->uuid, "GPU-", (unsigned)i, 200);
    copy_string(d->vbios, sizeof d->vbios, "96.00.A5.00.03");
    copy_string(d->inforom_img, sizeof d->inforom_img, "G520.0280.02.02");
    copy_string(d->inforom_oem, sizeof d->inforom_oem, "2.1");
    copy_string(d->inforom_ecc, sizeof d->inforom_ecc, "7.16");
    d->pci_bus = 0x83 + i;
    snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", (unsigned)d->pci_bus);
    d->pci_device_id = 0x233510DE;
    d->pci_subsys_id = 0x18BE10DE;
    d->pci_base_class = 3;
    d->pci_sub_class = 2;
    d->pcie_gen_cur = d->pcie_gen_max = d->pcie_gen_gpumax = 5;
    d->pcie_width_cur = d->pcie_width_max = 16;
    d->display_mode = 1;
    d->persistence = 1;
    d->accounting_buffer = 4000;
    d->reasons_supported = 0x1FF;
    d->reasons_active = 0x1;
    d->mem_total = 143770 * MIB + 943718; /* 143770.9 MiB: every cell rounds up */
    d->mem_reserved = 613 * MIB + 104858;
    d->mem_used = 0;
    d->mem_free = d->mem_total - d->mem_reserved - d->mem_used;
    d->cc_major = 9;
    d->ecc_cur = d->ecc_pend = 1;
    d->ecc_loc_mask = (1 << 2) | (1 << 7);
    d->hist_max = 3072;
    d->temp_gpu = 28 + i;
    d->temp_margin = 59;
    d->mem_temp = 32;
    d->power_mw = 77710;
    d->power_avg_mw = 77710;
    d->power_inst_mw = 78210;
    d->power_limit = d->enforced_limit = d->default_limit = d->max_limit = 700000;
    d->min_limit = 200000;
    d->edpp = 100;
    d->clk_graphics = d->clk_sm = 345;
    d->clk_mem = 3201;
    d->clk_video = 765;
    d->max_graphics = d->max_sm = 1980;
    d->max_mem = 3201;
    d->max_video = 1740;
    d->gsp_cur = d->gsp_default = 1;
    d->fabric_state = 3;
    d->plat_host = 1;
    d->plat_module = 1 + i;
    d->energy_mj = 123456789 + 1000LL * i;
    d->pcie_tx_kb = 1234;
    d->pcie_rx_kb = 5678;
    d->pcie_replay = 3;
    d->nvlink_raw_tx_kib = 1000; /* all links together (field values 140/141, scope UINT_MAX) */
    d->nvlink_raw_rx_kib = 2000;
    d->nvlink_data_tx_kib = 800; /* the payload only (field values 138/139, scope UINT_MAX) */
    d->nvlink_data_rx_kib = 1600;
    d->fv_thermal = 2500000; /* perf policy violation times (field values 75, 77-79, ns; 74 and 76 above) */
    d->fv_board_limit = 0;
    d->fv_low_util = 9000000000LL;
    d->fv_reliability = 0;
    d->nvlinks = 18; /* NVLinks 0-17 (an H100/H200 SXM); links past them answer INVALID_ARGUMENT */
    d->nvlink_crc_flit = 2; /* NVLink error counts over all links (field values 38, 45, 52, 59) */
    d->nvlink_crc_data = 1;
    d->nvlink_replay = 5;
    d->nvlink_recovery = 0;
    d->gpm_supported = 1;
    d->max_mig = 7;
    d->xid_supported = 1;
}

static void h200_unsupported(int top) {
    unsupported(top, FN_nvmlDeviceGetDriverModel_v2);
    unsupported(top, FN_nvmlDeviceGetGpuOperationMode);
    unsupported(top, FN_nvmlDeviceGetFanSpeed);
    unsupported(top, FN_nvmlDeviceGetDramEncryptionMode);
    unsupported(top, FN_nvmlDeviceGetRetiredPages);
    unsupported(top, FN_nvmlDeviceGetRetiredPagesPendingStatus);
    unsupported(top, FN_nvmlDeviceGetRemappedRows_v2);
    unsupported(top, FN_nvmlDeviceGetHostname_v1);
}

static int add_gpu(void) {
    int k = new_device();
    g_devs[k].top_index = g_ntop;
    g_top[g_ntop++] = k;
    g_visible = g_ntop;
    return g_ntop - 1;
}

static void add_h200(void) {
    int top = add_gpu();
    h200_values(&g_devs[g_top[top]], top);
    h200_unsupported(top);
}

static void add_rtx(void) {
    int top = add_gpu();
    FakeDevice *d = &g_devs[g_top[top]];
    copy_string(d->name, sizeof d->name, "NVIDIA GeForce RTX 4080 SUPER");
    make_uuid(d->uuid, sizeof d->uuid, "GPU-", (unsigned)top, 4080);
    copy_string(d->vbios, sizeof d->vbios, "95.03.44.00.B2");
    copy_string(d->inforom_img, sizeof d->inforom_img, "G002.0000.00.03");
    copy_string(d->inforom_oem, sizeof d->inforom_oem, "2.0");
    d->pci_bus = 0x01 + top;
    snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", (unsigned)d->pci_bus);
    d->pci_device_id = 0x270210DE;
    d->pci_subsys_id = 0x51101462;
    d->pci_base_class = 3;
    d->pcie_gen_cur = d->pcie_gen_max = d->pcie_gen_gpumax = 4;
    d->pcie_width_cur = d->pcie_width_max = 16;
    d->display_mode = 1;
    d->display_active = 1;
    d->addressing = 1;
    d->accounting_buffer = 4000;
    d->fan = 37;
    d->pstate = 2;
    d->reasons_supported = 0x1FF;
    d->reasons_active = 0x4;
    d->fv_sw_power_cap = 212553937000LL; /* ns: nvidia-smi prints 212553937 us */
    d->mem_total = 16376 * MIB;
    d->mem_reserved = 433 * MIB + 5;
    d->mem_used = 1473 * MIB + 7;
    d->mem_free = d->mem_total - d->mem_reserved - d->mem_used;
    d->cc_major = 8;
    d->cc_minor = 9;
    d->util_gpu = 7;
    d->util_mem = 2;
    d->util_enc = 72;
    d->enc_sessions = 2;
    d->enc_fps = 184;
    d->enc_latency = 62844;
    d->temp_gpu = 46;
    d->power_mw = 84240;
    d->power_avg_mw = 84240;
    d->power_inst_mw = 86410;
    d->power_limit = d->enforced_limit = d->default_limit = 320000;
    d->min_limit = 150000;
    d->max_limit = 400000;
    d->clk_graphics = d->clk_sm = 2805;
    d->clk_mem = 11251;
    d->clk_video = 2145;
    d->max_graphics = d->max_sm = 3165;
    d->max_mem = 11501;
    d->max_video = 2415;
    d->gsp_cur = d->gsp_default = 1;
    d->plat_host = 1;
    d->plat_module = 1;
    d->energy_mj = 987654321;
    d->pcie_tx_kb = 20000;
    d->pcie_rx_kb = 300000;
    d->pcie_replay = 0;
    d->nvlink_raw_tx_kib = d->nvlink_raw_rx_kib = -1; /* no NVLink on a consumer card */
    d->nvlink_data_tx_kib = d->nvlink_data_rx_kib = -1;
    d->nvlink_l0_tx_kib = d->nvlink_l0_rx_kib = -1;
    d->nvlink_crc_flit = d->nvlink_crc_data = d->nvlink_replay = d->nvlink_recovery = -1;
    d->mem_temp = -1; /* field 82 not supported */
    d->edpp = -1;     /* field 274 not supported */
    d->xid_supported = 1;
    int fns[] = {FN_nvmlDeviceGetSerial, FN_nvmlDeviceGetDriverModel_v2, FN_nvmlDeviceGetGpuOperationMode,
                 FN_nvmlDeviceGetDramEncryptionMode, FN_nvmlDeviceGetEccMode, FN_nvmlDeviceGetMemoryErrorCounter,
                 FN_nvmlDeviceGetTotalEccErrors, FN_nvmlDeviceGetRetiredPages,
                 FN_nvmlDeviceGetRetiredPagesPendingStatus, FN_nvmlDeviceGetRemappedRows,
                 FN_nvmlDeviceGetRemappedRows_v2, FN_nvmlDeviceGetRowRemapperHistogram,
                 FN_nvmlDeviceGetMarginTemperature, FN_nvmlDeviceGetMigMode, FN_nvmlDeviceGetC2cModeInfoV,
                 FN_nvmlDeviceGetGpuFabricInfoV, FN_nvmlDeviceGetHostname_v1, FN_nvmlDeviceGetMaxMigDeviceCount,
                 FN_nvmlGpmQueryDeviceSupport};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) unsupported(top, fns[i]);
    add_process(top, 2165, 25 * MIB, NO_INSTANCE, NO_INSTANCE);
    add_process(top, 5022, 503 * MIB, NO_INSTANCE, NO_INSTANCE);
    add_process(top, 5021, 360 * MIB - 4096, NO_INSTANCE, NO_INSTANCE);
    set_process_name(2165, "/usr/bin/kwin_wayland");
    set_process_name(5022, "ffmpeg");
    set_process_name(5021, "ffmpeg");
}

static void add_mig_device(int top, unsigned gi, unsigned ci, const char *profile, unsigned long long total,
                           unsigned long long used) {
    FakeDevice *parent = &g_devs[g_top[top]];
    int slot = 0;
    while (slot < MAX_MIG_SLOTS && parent->slots[slot] >= 0) slot++;
    if (slot == MAX_MIG_SLOTS || g_ndevs >= MAX_DEVICES) return;
    int k = new_device();
    parent = &g_devs[g_top[top]];
    FakeDevice *m = &g_devs[k];
    m->parent = g_top[top];
    parent->slots[slot] = k;
    char name[256];
    snprintf(name, sizeof name, "%s MIG %s", parent->name, profile);
    copy_string(m->name, sizeof m->name, name);
    make_uuid(m->uuid, sizeof m->uuid, "MIG-", (unsigned)(top * 64 + gi), ci);
    m->gi_id = gi;
    m->ci_id = ci;
    m->mem_total = total;
    m->mem_reserved = 0;
    m->mem_used = used;
    m->mem_free = total - used;
}

static void place_gpu_instance(int top, unsigned gi, unsigned profile, unsigned start, unsigned size) {
    FakeDevice *parent = &g_devs[g_top[top]];
    for (int s = 0; s < MAX_MIG_SLOTS; s++) {
        if (parent->slots[s] < 0) continue;
        FakeDevice *m = &g_devs[parent->slots[s]];
        if ((unsigned)m->gi_id != gi) continue;
        m->gi_profile = profile;
        m->placement_start = start;
        m->placement_size = size;
    }
}

static void set_gpm(int top, unsigned gi, double graphics, double sm, double occupancy, double tensor, double tx,
                    double rx) {
    FakeDevice *parent = &g_devs[g_top[top]];
    for (int s = 0; s < MAX_MIG_SLOTS; s++) {
        if (parent->slots[s] < 0) continue;
        FakeDevice *m = &g_devs[parent->slots[s]];
        if ((unsigned)m->gi_id != gi) continue;
        m->gpm_graphics = graphics;
        m->gpm_sm = sm;
        m->gpm_occupancy = occupancy;
        m->gpm_tensor = tensor;
        m->gpm_tx = tx;
        m->gpm_rx = rx;
    }
}

static void clear_state(void) {
    memset(g_devs, 0, sizeof g_devs);
    g_ndevs = g_ntop = g_visible = 0;
    memset(g_rc_all, 0, sizeof g_rc_all);
    memset(g_rc_dev, 0, sizeof g_rc_dev);
    memset(g_delay_ms, 0, sizeof g_delay_ms);
    memset(g_gpm_rc, 0, sizeof g_gpm_rc);
    memset(g_p2p, 0, sizeof g_p2p);
    g_nfield_rc = 0;
    g_nnames = 0;
    g_event_head = g_event_count = 0;
    g_lost_from = g_lost_until = 0;
    g_lost_gpu = -1;
    g_storm_pending = 0;
    g_cycles = 0;
    copy_string(g_driver, sizeof g_driver, "590.48.01");
    g_cuda = 13010;
}

static int apply_scenario(const char *name) {
    clear_state();
    copy_string(g_scenario, sizeof g_scenario, name);
    if (strcmp(name, "h200") == 0) {
        add_h200();
        add_process(0, 4242, 40950 * MIB - 100, NO_INSTANCE, NO_INSTANCE);
        set_process_name(4242, "python3 train.py");
    } else if (strcmp(name, "rtx") == 0) {
        copy_string(g_driver, sizeof g_driver, "595.71.05");
        g_cuda = 13020;
        add_rtx();
    } else if (strcmp(name, "mig") == 0) {
        add_h200();
        add_h200();
        FakeDevice *d = &g_devs[g_top[0]];
        d->mig_cur = d->mig_pend = 1;
        unsupported(0, FN_nvmlDeviceGetUtilizationRates);
        add_mig_device(0, 2, 0, "1c.3g.71gb", 71 * 1024 * MIB, 10 * 1024 * MIB);
        add_mig_device(0, 2, 1, "1c.3g.71gb", 71 * 1024 * MIB, 10 * 1024 * MIB);
        add_mig_device(0, 7, 0, "1g.18gb", 18 * 1024 * MIB, 0);
        place_gpu_instance(0, 2, 2, 0, 4); /* NVML_GPU_INSTANCE_PROFILE_3_SLICE at slices 0-3 */
        place_gpu_instance(0, 7, 0, 6, 1); /* NVML_GPU_INSTANCE_PROFILE_1_SLICE at slice 6 */
        set_gpm(0, 2, 45.5, 40.25, 30.0, 12.5, 100.0, 200.0);
        set_gpm(0, 7, 0.5, 0.25, 0.125, 0.0, 1.5, 2.5);
        add_process(0, 1001, 1024 * MIB, 2, 0);
        add_process(0, 1002, 2048 * MIB, 2, 1);
        add_process(1, 2001, 3072 * MIB, NO_INSTANCE, NO_INSTANCE);
        set_process_name(1001, "python3");
        set_process_name(1002, "python3");
        set_process_name(2001, "trainer");
    } else if (strcmp(name, "unsupported") == 0) {
        add_h200();
        int fns[] = {FN_nvmlDeviceGetPowerUsage, FN_nvmlDeviceGetClockInfo, FN_nvmlDeviceGetMaxClockInfo,
                     FN_nvmlDeviceGetTotalEnergyConsumption, FN_nvmlDeviceGetPcieThroughput,
                     FN_nvmlDeviceGetUtilizationRates, FN_nvmlDeviceGetEncoderStats,
                     FN_nvmlDeviceGetPcieReplayCounter};
        for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) unsupported(0, fns[i]);
        g_rc_all[FN_nvmlDeviceGetC2cModeInfoV] = NVML_ERROR_FUNCTION_NOT_FOUND;
        g_rc_all[FN_nvmlDeviceGetPlatformInfo] = NVML_ERROR_FUNCTION_NOT_FOUND;
        g_rc_all[FN_nvmlDeviceGetMemoryInfo_v2] = NVML_ERROR_FUNCTION_NOT_FOUND;
        g_rc_all[FN_nvmlDeviceGetTemperatureV] = NVML_ERROR_FUNCTION_NOT_FOUND;
        g_rc_all[FN_nvmlDeviceGetAddressingMode] = NVML_ERROR_DEPRECATED;
        g_devs[g_top[0]].mem_temp = -1;
        g_devs[g_top[0]].nvlink_raw_tx_kib = g_devs[g_top[0]].nvlink_raw_rx_kib = -1;
        g_devs[g_top[0]].nvlink_data_tx_kib = g_devs[g_top[0]].nvlink_data_rx_kib = -1;
        g_devs[g_top[0]].nvlink_l0_tx_kib = g_devs[g_top[0]].nvlink_l0_rx_kib = -1;
    } else if (strcmp(name, "noperm") == 0) {
        add_h200();
        int fns[] = {FN_nvmlDeviceGetEccMode, FN_nvmlDeviceGetMemoryErrorCounter, FN_nvmlDeviceGetTotalEccErrors,
                     FN_nvmlDeviceGetInforomVersion, FN_nvmlSystemGetProcessName,
                     FN_nvmlDeviceGetTotalEnergyConsumption};
        for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) g_rc_all[fns[i]] = NVML_ERROR_NO_PERMISSION;
        add_process(0, 4242, NA_U64, NO_INSTANCE, NO_INSTANCE);
    } else if (strcmp(name, "lost") == 0) {
        add_h200();
        add_h200();
        g_lost_gpu = 1;
        g_lost_from = 2;
        g_lost_until = 3;
    } else if (strcmp(name, "zero") == 0) {
        /* no devices: a broken container mount */
    } else if (strcmp(name, "xidstorm") == 0) {
        add_h200();
        add_h200();
        g_storm_pending = 1000;
    } else if (strcmp(name, "legacy") == 0) {
        copy_string(g_driver, sizeof g_driver, "550.54.15");
        g_cuda = 12040;
        add_h200();
        FakeDevice *d = &g_devs[g_top[0]];
        copy_string(d->name, sizeof d->name, "NVIDIA A100-SXM4-80GB");
        d->gpm_supported = 0; /* GPM is Hopper and newer */
        d->cc_major = 8;
        d->cc_minor = 0;
    } else {
        return -1;
    }
    return 0;
}

/* Copies GPU 0 (its readings, unsupported getters and processes) until there are n GPUs. */
static void replicate(int n) {
    if (g_ntop == 0 || n <= g_ntop) return;
    int base = g_top[0];
    while (g_ntop < n && g_ntop < MAX_TOP && g_ndevs < MAX_DEVICES) {
        int top = add_gpu();
        int k = g_top[top];
        FakeDevice *d = &g_devs[k];
        *d = g_devs[base];
        d->top_index = top;
        for (int s = 0; s < MAX_MIG_SLOTS; s++) d->slots[s] = -1;
        d->mig_cur = d->mig_pend = 0;
        make_uuid(d->uuid, sizeof d->uuid, "GPU-", (unsigned)top, 900);
        d->pci_bus = g_devs[base].pci_bus + top;
        snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", (unsigned)d->pci_bus);
        for (int fn = 0; fn < FN_COUNT; fn++) g_rc_dev[fn][k] = g_rc_dev[fn][base];
    }
}

/* ---- commands ---------------------------------------------------------------------------------- */
#define AS_NUMERIC_SETTER(fieldname)                                                                         \
    if (strcmp(key, #fieldname) == 0) {                                                                      \
        d->fieldname = strtoll(value, NULL, 0);                                                              \
        if (value[0] == '0' && (value[1] == 'x' || value[1] == 'X'))                                         \
            d->fieldname = (long long)strtoull(value, NULL, 16);                                             \
        return 0;                                                                                            \
    }
#define AS_DOUBLE_SETTER(fieldname)                                                                          \
    if (strcmp(key, #fieldname) == 0) {                                                                      \
        d->fieldname = strtod(value, NULL);                                                                  \
        return 0;                                                                                            \
    }
#define AS_STRING_SETTER(fieldname, size)                                                                    \
    if (strcmp(key, #fieldname) == 0) {                                                                      \
        copy_string(d->fieldname, sizeof d->fieldname, value);                                               \
        return 0;                                                                                            \
    }

static int set_field(FakeDevice *d, const char *key, const char *value) {
    NUMERIC_FIELDS(AS_NUMERIC_SETTER)
    DOUBLE_FIELDS(AS_DOUBLE_SETTER)
    STRING_FIELDS(AS_STRING_SETTER)
    return -1;
}

static int parse_gpu(const char *token, int *out) {
    if (strcmp(token, "*") == 0) {
        *out = -1;
        return 0;
    }
    char *end;
    long v = strtol(token, &end, 10);
    if (*end || v < 0 || v >= g_ntop) return -1;
    *out = (int)v;
    return 0;
}

static void push_event(int device, unsigned long long xid) {
    if (g_event_count == MAX_EVENTS) return;
    int slot = (g_event_head + g_event_count) % MAX_EVENTS;
    g_events[slot].device = device;
    g_events[slot].xid = xid;
    g_event_count++;
    pthread_cond_broadcast(&g_events_cond);
}

static const char *rest_after(const char *line, int words) {
    const char *p = line;
    for (int i = 0; i < words; i++) {
        while (*p == ' ' || *p == '\t') p++;
        while (*p && *p != ' ' && *p != '\t') p++;
    }
    if (*p == ' ' || *p == '\t') p++;
    return p;
}

static int run_command(const char *line) {
    char w[8][128] = {{0}};
    int n = sscanf(line, "%127s %127s %127s %127s %127s %127s %127s %127s", w[0], w[1], w[2], w[3], w[4], w[5],
                   w[6], w[7]);
    if (n <= 0 || w[0][0] == '#') return 0;
    int gpu;
    if (strcmp(w[0], "reset") == 0) {
        int refcount = g_refcount;
        int rc = apply_scenario(n >= 2 ? w[1] : g_scenario);
        g_refcount = refcount;
        return rc;
    }
    if (strcmp(w[0], "replicate") == 0 && n >= 2) {
        replicate(atoi(w[1]));
        return 0;
    }
    if (strcmp(w[0], "set") == 0 && n >= 4 && parse_gpu(w[1], &gpu) == 0) {
        const char *value = rest_after(line, 3);
        for (int t = 0; t < g_ntop; t++)
            if ((gpu < 0 || t == gpu) && set_field(&g_devs[g_top[t]], w[2], value) != 0) return -1;
        return 0;
    }
    if (strcmp(w[0], "setmig") == 0 && n >= 5 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        int slot = atoi(w[2]);
        if (slot < 0 || slot >= MAX_MIG_SLOTS || g_devs[g_top[gpu]].slots[slot] < 0) return -1;
        return set_field(&g_devs[g_devs[g_top[gpu]].slots[slot]], w[3], rest_after(line, 4));
    }
    if (strcmp(w[0], "rc") == 0 && n >= 3) {
        int fn = function_id(w[1]);
        if (fn < 0) return -1;
        int rc = atoi(w[2]);
        if (n >= 4) {
            if (parse_gpu(w[3], &gpu) != 0) return -1;
            if (gpu >= 0) {
                g_rc_dev[fn][g_top[gpu]] = rc;
                return 0;
            }
        }
        g_rc_all[fn] = rc;
        for (int k = 0; k < MAX_DEVICES; k++) g_rc_dev[fn][k] = 0;
        return 0;
    }
    if (strcmp(w[0], "fieldrc") == 0 && n >= 4 && parse_gpu(w[1], &gpu) == 0 && g_nfield_rc < MAX_FIELD_RC) {
        g_field_rc[g_nfield_rc].device = gpu < 0 ? -1 : g_top[gpu];
        g_field_rc[g_nfield_rc].field = (unsigned)atoi(w[2]);
        g_field_rc[g_nfield_rc].rc = atoi(w[3]);
        g_nfield_rc++;
        return 0;
    }
    if (strcmp(w[0], "gpmrc") == 0 && n >= 3) {
        int metric = atoi(w[1]);
        if (metric < 0 || metric >= 512) return -1;
        g_gpm_rc[metric] = atoi(w[2]);
        return 0;
    }
    if (strcmp(w[0], "delay") == 0 && n >= 3) {
        int fn = function_id(w[1]);
        if (fn < 0) return -1;
        g_delay_ms[fn] = atoi(w[2]);
        return 0;
    }
    if (strcmp(w[0], "xid") == 0 && n >= 3 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        int count = n >= 4 ? atoi(w[3]) : 1;
        for (int i = 0; i < count; i++) push_event(g_top[gpu], strtoull(w[2], NULL, 10));
        return 0;
    }
    if ((strcmp(w[0], "lose") == 0 || strcmp(w[0], "recover") == 0) && n >= 2 && parse_gpu(w[1], &gpu) == 0) {
        for (int t = 0; t < g_ntop; t++)
            if (gpu < 0 || t == gpu) g_devs[g_top[t]].lost = strcmp(w[0], "lose") == 0;
        return 0;
    }
    if (strcmp(w[0], "count") == 0 && n >= 2) {
        int c = atoi(w[1]);
        if (c < 0 || c > g_ntop) return -1;
        g_visible = c;
        return 0;
    }
    if (strcmp(w[0], "driver") == 0 && n >= 2) {
        copy_string(g_driver, sizeof g_driver, w[1]);
        return 0;
    }
    if (strcmp(w[0], "cuda") == 0 && n >= 2) {
        g_cuda = atoi(w[1]);
        return 0;
    }
    if (strcmp(w[0], "proc") == 0 && n >= 4 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        unsigned long long memory = strcmp(w[3], "na") == 0 ? NA_U64 : strtoull(w[3], NULL, 10);
        unsigned gi = n >= 6 ? (unsigned)atoi(w[4]) : NO_INSTANCE, ci = n >= 6 ? (unsigned)atoi(w[5]) : NO_INSTANCE;
        add_process(gpu, (unsigned)strtoul(w[2], NULL, 10), memory, gi, ci);
        return 0;
    }
    if (strcmp(w[0], "mpsproc") == 0 && n >= 4 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        FakeDevice *d = &g_devs[g_top[gpu]];
        if (d->nprocs >= MAX_PROCS) return -1;
        add_process(gpu, (unsigned)strtoul(w[2], NULL, 10), strcmp(w[3], "na") == 0 ? NA_U64 : strtoull(w[3], NULL, 10),
                    NO_INSTANCE, NO_INSTANCE);
        d->procs[d->nprocs - 1].mps = 1;
        return 0;
    }
    if (strcmp(w[0], "noprocs") == 0 && n >= 2 && parse_gpu(w[1], &gpu) == 0) {
        for (int t = 0; t < g_ntop; t++)
            if (gpu < 0 || t == gpu) g_devs[g_top[t]].nprocs = 0;
        return 0;
    }
    if (strcmp(w[0], "psample") == 0 && n >= 8 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        FakeDevice *d = &g_devs[g_top[gpu]];
        if (d->nsamples >= MAX_PROCS) return -1;
        nvmlProcessUtilizationSample_t *s = &d->samples[d->nsamples++];
        s->pid = (unsigned)strtoul(w[2], NULL, 10);
        s->timeStamp = strtoull(w[3], NULL, 10);
        s->smUtil = (unsigned)strtoul(w[4], NULL, 10);
        s->memUtil = (unsigned)strtoul(w[5], NULL, 10);
        s->encUtil = (unsigned)strtoul(w[6], NULL, 10);
        s->decUtil = (unsigned)strtoul(w[7], NULL, 10);
        return 0;
    }
    if (strcmp(w[0], "psamplepad") == 0 && n >= 3 && parse_gpu(w[1], &gpu) == 0) {
        for (int t = 0; t < g_ntop; t++)
            if (gpu < 0 || t == gpu) g_devs[g_top[t]].sample_pad = atoi(w[2]) < MAX_PROCS ? atoi(w[2]) : MAX_PROCS;
        return 0;
    }
    if (strcmp(w[0], "nosamples") == 0 && n >= 2 && parse_gpu(w[1], &gpu) == 0) {
        for (int t = 0; t < g_ntop; t++)
            if (gpu < 0 || t == gpu) g_devs[g_top[t]].nsamples = 0;
        return 0;
    }
    if (strcmp(w[0], "pname") == 0 && n >= 3) {
        set_process_name((unsigned)strtoul(w[1], NULL, 10), rest_after(line, 2));
        return 0;
    }
    if (strcmp(w[0], "mig") == 0 && n >= 7 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        add_mig_device(gpu, (unsigned)atoi(w[2]), (unsigned)atoi(w[3]), w[4], strtoull(w[5], NULL, 10),
                       strtoull(w[6], NULL, 10));
        return 0;
    }
    if (strcmp(w[0], "gpm") == 0 && n >= 8 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        double v[6] = {0};
        if (sscanf(rest_after(line, 3), "%lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
            return -1;
        set_gpm(gpu, (unsigned)atoi(w[2]), v[0], v[1], v[2], v[3], v[4], v[5]);
        return 0;
    }
    if (strcmp(w[0], "gpmdev") == 0 && n >= 5 && parse_gpu(w[1], &gpu) == 0) {
        double v[3] = {0};
        if (sscanf(rest_after(line, 2), "%lf %lf %lf", &v[0], &v[1], &v[2]) != 3) return -1;
        for (int t = 0; t < g_ntop; t++) {
            if (gpu >= 0 && t != gpu) continue;
            FakeDevice *d = &g_devs[g_top[t]];
            d->gpm_graphics = v[0];
            d->gpm_tensor = v[1];
            d->gpm_dram = v[2];
        }
        return 0;
    }
    if (strcmp(w[0], "p2p") == 0 && n >= 5 && parse_gpu(w[1], &gpu) == 0) {
        int peer, index = atoi(w[3]), status = atoi(w[4]);
        if (parse_gpu(w[2], &peer) != 0 || index < 0 || index >= P2P_CAPS) return -1;
        for (int a = 0; a < g_ntop; a++)
            for (int b = 0; b < g_ntop; b++)
                if ((gpu < 0 || a == gpu) && (peer < 0 || b == peer)) g_p2p[a][b][index] = status;
        return 0;
    }
    if (strcmp(w[0], "migclear") == 0 && n >= 2 && parse_gpu(w[1], &gpu) == 0 && gpu >= 0) {
        for (int s = 0; s < MAX_MIG_SLOTS; s++) g_devs[g_top[gpu]].slots[s] = -1;
        return 0;
    }
    return -1;
}

/* Applies the complete lines appended to the control file since the last look. */
static void poll_control_file(void) {
    if (!g_control_path[0]) return;
    FILE *f = fopen(g_control_path, "r");
    if (!f) return;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && st.st_size < g_control_offset) g_control_offset = 0;
    if (fseek(f, g_control_offset, SEEK_SET) == 0) {
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            size_t len = strlen(line);
            if (len == 0 || line[len - 1] != '\n') break; /* a line still being written */
            g_control_offset += (long)len;
            line[len - 1] = 0;
            if (run_command(line) != 0) fprintf(stderr, "fake_nvml: bad control command: %s\n", line);
        }
    }
    fclose(f);
}

static void load_once(void) {
    const char *scenario = getenv("FAKE_NVML_SCENARIO");
    if (apply_scenario(scenario && *scenario ? scenario : "h200") != 0) {
        fprintf(stderr, "fake_nvml: unknown scenario %s, using h200\n", scenario);
        apply_scenario("h200");
    }
    const char *gpus = getenv("FAKE_NVML_GPUS");
    if (gpus && *gpus) replicate(atoi(gpus));
    const char *control = getenv("FAKE_NVML_CONTROL");
    if (control) copy_string(g_control_path, sizeof g_control_path, control);
}

/* ---- entry plumbing ---------------------------------------------------------------------------- */
static void lock(void) {
    pthread_once(&g_once, load_once);
    pthread_mutex_lock(&g_lock);
}

static nvmlReturn_t done(nvmlReturn_t rc) {
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int device_index(nvmlDevice_t device) {
    if (device < g_devs || device >= g_devs + MAX_DEVICES) return -1;
    if (((char *)device - (char *)g_devs) % sizeof(FakeDevice) != 0) return -1;
    if (device->magic != DEVICE_MAGIC) return -1;
    return (int)(device - g_devs);
}

static int is_lost(int k) {
    const FakeDevice *d = &g_devs[k];
    if (d->parent >= 0) return is_lost(d->parent);
    if (d->lost) return 1;
    return d->top_index == g_lost_gpu && (long)g_cycles >= g_lost_from && (long)g_cycles <= g_lost_until;
}

/* Common start of an entry point: count, delay, lock, checks. On success the lock is held. */
static nvmlReturn_t enter(int fn, nvmlDevice_t device, int needs_device, FakeDevice **out) {
    lock();
    g_calls[fn]++;
    int delay = g_delay_ms[fn];
    if (delay > 0) {
        pthread_mutex_unlock(&g_lock);
        sleep_ms(delay);
        pthread_mutex_lock(&g_lock);
    }
    if (fn != FN_nvmlInitWithFlags && fn != FN_nvmlInit_v2 && g_refcount == 0) return done(NVML_ERROR_UNINITIALIZED);
    int k = -1;
    if (needs_device) {
        k = device_index(device);
        if (k < 0) return done(NVML_ERROR_INVALID_ARGUMENT);
        if (is_lost(k)) return done(NVML_ERROR_GPU_IS_LOST);
        if (out) *out = &g_devs[k];
    }
    int rc = rc_for(fn, k);
    if (rc == 0 && k >= 0 && g_devs[k].parent >= 0) rc = rc_for(fn, g_devs[k].parent);
    if (rc != 0) return done(rc);
    return NVML_SUCCESS;
}

#define ENTER(fn)                                                                                            \
    do {                                                                                                     \
        nvmlReturn_t entered_ = enter(FN_##fn, NULL, 0, NULL);                                               \
        if (entered_ != NVML_SUCCESS) return entered_;                                                       \
    } while (0)
#define ENTER_DEVICE(fn, device)                                                                             \
    FakeDevice *d = NULL;                                                                                    \
    do {                                                                                                     \
        nvmlReturn_t entered_ = enter(FN_##fn, device, 1, &d);                                               \
        if (entered_ != NVML_SUCCESS) return entered_;                                                       \
    } while (0)

static nvmlReturn_t put_string(char *buffer, unsigned length, const char *value) {
    if (!buffer) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (strlen(value) + 1 > length) return done(NVML_ERROR_INSUFFICIENT_SIZE);
    memcpy(buffer, value, strlen(value) + 1);
    return done(NVML_SUCCESS);
}

#define UINT_GETTER(fn, expression)                                                                          \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out) {                                                \
        ENTER_DEVICE(fn, device);                                                                            \
        if (!out) return done(NVML_ERROR_INVALID_ARGUMENT);                                                  \
        *out = (unsigned int)(expression);                                                                   \
        return done(NVML_SUCCESS);                                                                           \
    }

/* ---- initialization --------------------------------------------------------------------------- */
static nvmlReturn_t init_common(int fn) {
    nvmlReturn_t rc = enter(fn, NULL, 0, NULL);
    if (rc != NVML_SUCCESS) return rc;
    const char *forced = getenv("FAKE_NVML_INIT_RETURN");
    if (forced && atoi(forced) != 0) return done(atoi(forced));
    poll_control_file();
    g_refcount++;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init_common(FN_nvmlInitWithFlags);
}

nvmlReturn_t nvmlInit_v2(void) { return init_common(FN_nvmlInit_v2); }

nvmlReturn_t nvmlShutdown(void) {
    ENTER(nvmlShutdown);
    g_refcount--;
    return done(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    default: return "Unknown Error";
    }
}

/* ---- system ------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER(nvmlSystemGetDriverVersion);
    return put_string(version, length, g_driver);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    ENTER(nvmlSystemGetCudaDriverVersion);
    g_cycles++;
    if (!version) return done(NVML_ERROR_INVALID_ARGUMENT);
    *version = g_cuda;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    ENTER(nvmlSystemGetProcessName);
    for (int i = 0; i < g_nnames; i++)
        if (g_names[i].pid == pid) return put_string(name, length, g_names[i].name);
    return done(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER(nvmlDeviceGetCount_v2);
    poll_control_file();
    if (!count) return done(NVML_ERROR_INVALID_ARGUMENT);
    *count = (unsigned)g_visible;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER(nvmlDeviceGetHandleByIndex_v2);
    if (!device || index >= (unsigned)g_visible) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (is_lost(g_top[index])) return done(NVML_ERROR_GPU_IS_LOST);
    *device = &g_devs[g_top[index]];
    return done(NVML_SUCCESS);
}

/* ---- identity and strings --------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER_DEVICE(nvmlDeviceGetName, device);
    return put_string(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    ENTER_DEVICE(nvmlDeviceGetSerial, device);
    if (!d->serial[0]) return done(NVML_ERROR_NOT_SUPPORTED);
    return put_string(serial, length, d->serial);
}

#ifndef FAKE_NVML_OMIT_UUID
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER_DEVICE(nvmlDeviceGetUUID, device);
    return put_string(uuid, length, d->uuid);
}
#endif

UINT_GETTER(nvmlDeviceGetIndex, d->parent >= 0 ? g_devs[d->parent].top_index : d->top_index)

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    ENTER_DEVICE(nvmlDeviceGetVbiosVersion, device);
    return put_string(version, length, d->vbios);
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length) {
    ENTER_DEVICE(nvmlDeviceGetInforomImageVersion, device);
    return put_string(version, length, d->inforom_img);
}

nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, int object, char *version, unsigned int length) {
    ENTER_DEVICE(nvmlDeviceGetInforomVersion, device);
    const char *value = object == 0 ? d->inforom_oem : object == 1 ? d->inforom_ecc : object == 2 ? d->inforom_pwr : "";
    if (object < 0 || object > 3) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!value[0]) return done(NVML_ERROR_NOT_SUPPORTED);
    return put_string(version, length, value);
}

nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) {
    ENTER_DEVICE(nvmlDeviceValidateInforom, device);
    (void)d;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHostname_v1(nvmlDevice_t device, nvmlHostname_t *hostname) {
    ENTER_DEVICE(nvmlDeviceGetHostname_v1, device);
    if (!hostname) return done(NVML_ERROR_INVALID_ARGUMENT);
    copy_string(hostname->value, sizeof hostname->value, d->hostname);
    return done(NVML_SUCCESS);
}

/* ---- PCI ------------------------------------------------------------------------------------------ */
nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci) {
    ENTER_DEVICE(nvmlDeviceGetPciInfoExt, device);
    if (!pci) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (pci->version != PCI_EXT_VERSION) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    pci->domain = (unsigned)d->pci_domain;
    pci->bus = (unsigned)d->pci_bus;
    pci->device = (unsigned)d->pci_device;
    pci->pciDeviceId = (unsigned)d->pci_device_id;
    pci->pciSubSystemId = (unsigned)d->pci_subsys_id;
    pci->baseClass = (unsigned)d->pci_base_class;
    pci->subClass = (unsigned)d->pci_sub_class;
    copy_string(pci->busId, sizeof pci->busId, d->bus_id);
    return done(NVML_SUCCESS);
}

UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, d->pcie_gen_cur)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, d->pcie_gen_max)
UINT_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, d->pcie_gen_gpumax)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, d->pcie_width_cur)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, d->pcie_width_max)

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value) {
    ENTER_DEVICE(nvmlDeviceGetPcieThroughput, device);
    if (!value || counter < 0 || counter > 1) return done(NVML_ERROR_INVALID_ARGUMENT);
    *value = (unsigned)(counter == 0 ? d->pcie_tx_kb : d->pcie_rx_kb);
    return done(NVML_SUCCESS);
}

/* ---- modes ---------------------------------------------------------------------------------------- */
UINT_GETTER(nvmlDeviceGetDisplayMode, d->display_mode)
UINT_GETTER(nvmlDeviceGetDisplayActive, d->display_active)
UINT_GETTER(nvmlDeviceGetPersistenceMode, d->persistence)
UINT_GETTER(nvmlDeviceGetAccountingMode, d->accounting)
UINT_GETTER(nvmlDeviceGetAccountingBufferSize, d->accounting_buffer)
UINT_GETTER(nvmlDeviceGetFanSpeed, d->fan)
UINT_GETTER(nvmlDeviceGetPerformanceState, d->pstate)
UINT_GETTER(nvmlDeviceGetComputeMode, d->compute_mode)
UINT_GETTER(nvmlDeviceGetPowerUsage, d->power_mw)
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, d->power_limit)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, d->enforced_limit)
UINT_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, d->default_limit)
UINT_GETTER(nvmlDeviceGetRetiredPagesPendingStatus, d->retired_pending)
UINT_GETTER(nvmlDeviceGetMaxMigDeviceCount, d->max_mig)
UINT_GETTER(nvmlDeviceGetGpuInstanceId, d->gi_id)
UINT_GETTER(nvmlDeviceGetComputeInstanceId, d->ci_id)

#define PAIR_GETTER(fn, first, second)                                                                       \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *a, unsigned int *b) {                                 \
        ENTER_DEVICE(fn, device);                                                                            \
        if (!a || !b) return done(NVML_ERROR_INVALID_ARGUMENT);                                              \
        *a = (unsigned)(first);                                                                              \
        *b = (unsigned)(second);                                                                             \
        return done(NVML_SUCCESS);                                                                           \
    }

PAIR_GETTER(nvmlDeviceGetEccMode, d->ecc_cur, d->ecc_pend)
PAIR_GETTER(nvmlDeviceGetDriverModel_v2, d->driver_model_cur, d->driver_model_pend)
PAIR_GETTER(nvmlDeviceGetGpuOperationMode, d->gom_cur, d->gom_pend)
PAIR_GETTER(nvmlDeviceGetEncoderUtilization, d->util_enc, 167000)
PAIR_GETTER(nvmlDeviceGetDecoderUtilization, d->util_dec, 167000)
PAIR_GETTER(nvmlDeviceGetJpgUtilization, d->util_jpg, 167000)
PAIR_GETTER(nvmlDeviceGetOfaUtilization, d->util_ofa, 167000)
PAIR_GETTER(nvmlDeviceGetPowerManagementLimitConstraints, d->min_limit, d->max_limit)
PAIR_GETTER(nvmlDeviceGetMigMode, d->mig_cur, d->mig_pend)
PAIR_GETTER(nvmlDeviceGetGspFirmwareMode, d->gsp_cur, d->gsp_default)

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    ENTER_DEVICE(nvmlDeviceGetCudaComputeCapability, device);
    if (!major || !minor) return done(NVML_ERROR_INVALID_ARGUMENT);
    *major = (int)d->cc_major;
    *minor = (int)d->cc_minor;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlVersionedValue_t *mode) {
    ENTER_DEVICE(nvmlDeviceGetAddressingMode, device);
    if (!mode) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (mode->version != VALUE_V1_VERSION) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    mode->value = (unsigned)d->addressing;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDramEncryptionMode(nvmlDevice_t device, nvmlVersionedValue_t *current,
                                             nvmlVersionedValue_t *pending) {
    ENTER_DEVICE(nvmlDeviceGetDramEncryptionMode, device);
    if (!current || !pending) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (current->version != VALUE_V1_VERSION || pending->version != VALUE_V1_VERSION)
        return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    current->value = (unsigned)d->dram_enc_cur;
    pending->value = (unsigned)d->dram_enc_pend;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_t *info) {
    ENTER_DEVICE(nvmlDeviceGetC2cModeInfoV, device);
    if (!info) return done(NVML_ERROR_INVALID_ARGUMENT);
    info->isC2cEnabled = (unsigned)d->c2c;
    return done(NVML_SUCCESS);
}

/* ---- utilization, clocks, temperature, power ------------------------------------------------------ */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    ENTER_DEVICE(nvmlDeviceGetUtilizationRates, device);
    if (!utilization) return done(NVML_ERROR_INVALID_ARGUMENT);
    utilization->gpu = (unsigned)d->util_gpu;
    utilization->memory = (unsigned)d->util_mem;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessions, unsigned int *fps,
                                       unsigned int *latency) {
    ENTER_DEVICE(nvmlDeviceGetEncoderStats, device);
    if (!sessions || !fps || !latency) return done(NVML_ERROR_INVALID_ARGUMENT);
    *sessions = (unsigned)d->enc_sessions;
    *fps = (unsigned)d->enc_fps;
    *latency = (unsigned)d->enc_latency;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_DEVICE(nvmlDeviceGetSupportedClocksEventReasons, device);
    if (!reasons) return done(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = (unsigned long long)d->reasons_supported;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    ENTER_DEVICE(nvmlDeviceGetCurrentClocksEventReasons, device);
    if (!reasons) return done(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = (unsigned long long)d->reasons_active;
    return done(NVML_SUCCESS);
}

static long long clock_of(const FakeDevice *d, int type, int max) {
    if (max) return type == 0 ? d->max_graphics : type == 1 ? d->max_sm : type == 2 ? d->max_mem : d->max_video;
    return type == 0 ? d->clk_graphics : type == 1 ? d->clk_sm : type == 2 ? d->clk_mem : d->clk_video;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    ENTER_DEVICE(nvmlDeviceGetClockInfo, device);
    if (!clock || type < 0 || type > 3) return done(NVML_ERROR_INVALID_ARGUMENT);
    *clock = (unsigned)clock_of(d, type, 0);
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    ENTER_DEVICE(nvmlDeviceGetMaxClockInfo, device);
    if (!clock || type < 0 || type > 3) return done(NVML_ERROR_INVALID_ARGUMENT);
    *clock = (unsigned)clock_of(d, type, 1);
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature) {
    ENTER_DEVICE(nvmlDeviceGetTemperatureV, device);
    if (!temperature) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (temperature->version != TEMPERATURE_V1_VERSION) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (temperature->sensorType != 0) return done(NVML_ERROR_NOT_SUPPORTED);
    temperature->temperature = (int)d->temp_gpu;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temperature) {
    ENTER_DEVICE(nvmlDeviceGetTemperature, device);
    if (!temperature) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (sensor != 0) return done(NVML_ERROR_NOT_SUPPORTED);
    *temperature = (unsigned)d->temp_gpu;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *margin) {
    ENTER_DEVICE(nvmlDeviceGetMarginTemperature, device);
    if (!margin) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (margin->version != MARGIN_V1_VERSION) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    margin->marginTemperature = (int)d->temp_margin;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    ENTER_DEVICE(nvmlDeviceGetPcieReplayCounter, device);
    if (!value) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (d->pcie_replay < 0) return done(NVML_ERROR_NOT_SUPPORTED);
    *value = (unsigned)d->pcie_replay;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    ENTER_DEVICE(nvmlDeviceGetTotalEnergyConsumption, device);
    if (!energy) return done(NVML_ERROR_INVALID_ARGUMENT);
    *energy = (unsigned long long)d->energy_mj;
    return done(NVML_SUCCESS);
}

/* ---- field values ------------------------------------------------------------------------------ */
static int field_rc(int k, unsigned field) {
    for (int i = 0; i < g_nfield_rc; i++)
        if (g_field_rc[i].field == field && (g_field_rc[i].device < 0 || g_field_rc[i].device == k))
            return g_field_rc[i].rc;
    return 0;
}

static long long link_kib(const FakeDevice *d, unsigned link, long long link0) {
    return link0 < 0 || link >= (unsigned)d->nvlinks ? -1 : link0 * (long long)(link + 1);
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    ENTER_DEVICE(nvmlDeviceGetFieldValues, device);
    if (!values || count < 0) return done(NVML_ERROR_INVALID_ARGUMENT);
    int k = (int)(d - g_devs);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = now_ns() / 1000;
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_SUCCESS;
        v->valueType = 3; /* unsigned long long */
        long long value = -1;
        switch (v->fieldId) {
        case 74: value = d->fv_sw_power_cap; break;
        case 75: value = d->fv_thermal; break;
        case 76: value = d->fv_sync_boost; break;
        case 77: value = d->fv_board_limit; break;
        case 78: value = d->fv_low_util; break;
        case 79: value = d->fv_reliability; break;
        case 38: value = d->nvlink_crc_flit; break;
        case 45: value = d->nvlink_crc_data; break;
        case 52: value = d->nvlink_replay; break;
        case 59: value = d->nvlink_recovery; break;
        case 269: value = d->fv_sw_thermal; break;
        case 270: value = d->fv_hw_thermal; break;
        case 271: value = d->fv_hw_power_brake; break;
        case 82: value = d->mem_temp; v->valueType = 1; break;
        case 185: value = d->power_avg_mw; v->valueType = 1; break;
        case 186: value = d->power_inst_mw; v->valueType = 1; break;
        case 230: value = d->recovery_action; v->valueType = 1; break;
        case 274: value = d->edpp; v->valueType = 1; break;
        /* NVLink data and raw throughput (KiB): the all-links aggregate (scope UINT_MAX) and link 0's payload */
        /* link n's (scope n < nvlinks) is n + 1 times link 0's */
        case 138: value = v->scopeId == 0xFFFFFFFFu ? d->nvlink_data_tx_kib : link_kib(d, v->scopeId, d->nvlink_l0_tx_kib); break;
        case 139: value = v->scopeId == 0xFFFFFFFFu ? d->nvlink_data_rx_kib : link_kib(d, v->scopeId, d->nvlink_l0_rx_kib); break;
        case 140: value = v->scopeId == 0xFFFFFFFFu ? d->nvlink_raw_tx_kib : -1; break;
        case 141: value = v->scopeId == 0xFFFFFFFFu ? d->nvlink_raw_rx_kib : -1; break;
        default: break;
        }
        int rc = field_rc(k, v->fieldId);
        if (rc) {
            v->nvmlReturn = rc;
        } else if (value < 0) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (v->valueType == 1) {
            v->value.uiVal = (unsigned)value;
        } else {
            v->value.ullVal = (unsigned long long)value;
        }
    }
    return done(NVML_SUCCESS);
}

/* ---- NVLink per link: links 0 .. nvlinks-1 exist (active), any other is INVALID_ARGUMENT as past a real GPU's */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive) {
    ENTER_DEVICE(nvmlDeviceGetNvLinkState, device);
    if (!isActive || link >= (unsigned)d->nvlinks) return done(NVML_ERROR_INVALID_ARGUMENT);
    *isActive = 1;
    return done(NVML_SUCCESS);
}

/* nvmlNvLinkErrorCounter_t: 0 replay, 1 recovery, 2 CRC flit, 3 CRC data; link n's count is the all-links
 * field value's (nvlink_replay ...) plus n, NOT_SUPPORTED where that one is unset (-1). */
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, int counter,
                                             unsigned long long *value) {
    ENTER_DEVICE(nvmlDeviceGetNvLinkErrorCounter, device);
    if (!value || link >= (unsigned)d->nvlinks || counter < 0 || counter > 4) return done(NVML_ERROR_INVALID_ARGUMENT);
    long long base = counter == 0 ? d->nvlink_replay : counter == 1 ? d->nvlink_recovery
                   : counter == 2 ? d->nvlink_crc_flit : counter == 3 ? d->nvlink_crc_data : -1;
    if (base < 0) return done(NVML_ERROR_NOT_SUPPORTED);
    *value = (unsigned long long)(base + link);
    return done(NVML_SUCCESS);
}

/* ---- memory ---------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    ENTER_DEVICE(nvmlDeviceGetMemoryInfo_v2, device);
    if (!memory) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != MEMORY_V2_VERSION) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory->total = (unsigned long long)d->mem_total;
    memory->reserved = (unsigned long long)d->mem_reserved;
    memory->used = (unsigned long long)d->mem_used;
    memory->free = (unsigned long long)d->mem_free;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER_DEVICE(nvmlDeviceGetMemoryInfo, device);
    if (!memory) return done(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = (unsigned long long)d->mem_total;
    memory->used = (unsigned long long)(d->mem_used + d->mem_reserved);
    memory->free = (unsigned long long)d->mem_free;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER_DEVICE(nvmlDeviceGetConfComputeProtectedMemoryUsage, device);
    if (!memory) return done(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = (unsigned long long)d->prot_total;
    memory->used = (unsigned long long)d->prot_used;
    memory->free = (unsigned long long)d->prot_free;
    return done(NVML_SUCCESS);
}

/* ---- ECC and memory health ------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, int type, int counter, int location,
                                             unsigned long long *count) {
    ENTER_DEVICE(nvmlDeviceGetMemoryErrorCounter, device);
    if (!count || type < 0 || type > 1 || counter < 0 || counter > 1 || location < 0 || location > 7)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!(d->ecc_loc_mask & (1LL << location))) return done(NVML_ERROR_NOT_SUPPORTED);
    /* ecc_base + a distinct small offset per (type, counter, location) once errors are configured */
    *count = d->ecc_base ? (unsigned long long)(d->ecc_base + type * 100 + counter * 10 + location) : 0;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int type, int counter, unsigned long long *count) {
    ENTER_DEVICE(nvmlDeviceGetTotalEccErrors, device);
    if (!count || type < 0 || type > 1 || counter < 0 || counter > 1) return done(NVML_ERROR_INVALID_ARGUMENT);
    *count = d->ecc_base ? (unsigned long long)(d->ecc_base * 2 + type * 100 + counter * 10) : 0;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status) {
    ENTER_DEVICE(nvmlDeviceGetSramEccErrorStatus, device);
    if (!status) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (status->version != SRAM_V1_VERSION) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    status->aggregateUncParity = (unsigned long long)d->sram_agg_unc_parity;
    status->aggregateUncSecDed = (unsigned long long)d->sram_agg_unc_secded;
    status->aggregateCor = (unsigned long long)d->sram_agg_cor;
    status->volatileUncParity = (unsigned long long)d->sram_vol_unc_parity;
    status->volatileUncSecDed = (unsigned long long)d->sram_vol_unc_secded;
    status->volatileCor = (unsigned long long)d->sram_vol_cor;
    status->aggregateUncBucketL2 = (unsigned long long)d->sram_l2;
    status->aggregateUncBucketSm = (unsigned long long)d->sram_sm;
    status->aggregateUncBucketPcie = (unsigned long long)d->sram_pcie;
    status->aggregateUncBucketMcu = (unsigned long long)d->sram_mcu;
    status->aggregateUncBucketOther = (unsigned long long)d->sram_other;
    status->bThresholdExceeded = (unsigned)d->sram_threshold;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *count,
                                       unsigned long long *addresses) {
    ENTER_DEVICE(nvmlDeviceGetRetiredPages, device);
    if (!count || cause < 0 || cause > 1) return done(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = (unsigned)(cause == 0 ? d->retired_sbe : d->retired_dbe);
    if (!addresses || *count < n) {
        *count = n;
        return done(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (unsigned i = 0; i < n; i++) addresses[i] = 0x1000ULL * (i + 1);
    *count = n;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    ENTER_DEVICE(nvmlDeviceGetRemappedRows, device);
    if (!corr || !unc || !pending || !failure) return done(NVML_ERROR_INVALID_ARGUMENT);
    *corr = (unsigned)d->remap_corr;
    *unc = (unsigned)d->remap_unc;
    *pending = (unsigned)d->remap_pending;
    *failure = (unsigned)d->remap_failure;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRemappedRows_v2(nvmlDevice_t device, nvmlRemappedRowsInfo_v2_t *info) {
    ENTER_DEVICE(nvmlDeviceGetRemappedRows_v2, device);
    if (!info) return done(NVML_ERROR_INVALID_ARGUMENT);
    info->corrActiveRemaps = (unsigned)d->remap_corr;
    info->corrInactiveRemaps = (unsigned)d->remap_corr_inactive;
    info->uncActiveRemaps = (unsigned)d->remap_unc;
    info->uncInactiveRemaps = (unsigned)d->remap_unc_inactive;
    info->bPending = (unsigned)d->remap_pending;
    info->bFailureOccurred = (unsigned)d->remap_failure;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values) {
    ENTER_DEVICE(nvmlDeviceGetRowRemapperHistogram, device);
    if (!values) return done(NVML_ERROR_INVALID_ARGUMENT);
    values->max = (unsigned)d->hist_max;
    values->high = (unsigned)d->hist_high;
    values->partial = (unsigned)d->hist_partial;
    values->low = (unsigned)d->hist_low;
    values->none = (unsigned)d->hist_none;
    return done(NVML_SUCCESS);
}

/* ---- peer to peer ----------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, unsigned int p2pIndex,
                                    unsigned int *p2pStatus) {
    ENTER_DEVICE(nvmlDeviceGetP2PStatus, device1);
    int peer = device_index(device2);
    if (peer < 0 || !p2pStatus || p2pIndex >= P2P_CAPS) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (is_lost(peer)) return done(NVML_ERROR_GPU_IS_LOST);
    if (d->parent >= 0 || g_devs[peer].parent >= 0) return done(NVML_ERROR_INVALID_ARGUMENT); /* MIG devices */
    *p2pStatus = (unsigned)g_p2p[d->top_index][g_devs[peer].top_index][p2pIndex];
    return done(NVML_SUCCESS);
}

/* ---- fabric and platform --------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    ENTER_DEVICE(nvmlDeviceGetGpuFabricInfoV, device);
    if (!info) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != FABRIC_V2_VERSION && info->version != FABRIC_V3_VERSION)
        return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (info->version == FABRIC_V3_VERSION && d->fabric_v2_only) /* a driver before the v3 struct */
        return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    for (int i = 0; i < 8; i++) {
        info->clusterUuid[i] = (unsigned char)((unsigned long long)d->fabric_cluster_hi >> (56 - 8 * i));
        info->clusterUuid[8 + i] = (unsigned char)((unsigned long long)d->fabric_cluster_lo >> (56 - 8 * i));
    }
    info->status = (unsigned)d->fabric_status;
    info->cliqueId = (unsigned)d->fabric_clique;
    info->state = (unsigned)d->fabric_state;
    info->healthMask = (unsigned)d->fabric_health_mask;
    if (info->version == FABRIC_V3_VERSION) info->healthSummary = (unsigned char)d->fabric_health_summary;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *info) {
    ENTER_DEVICE(nvmlDeviceGetPlatformInfo, device);
    if (!info) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != PLATFORM_V1_VERSION && info->version != PLATFORM_V2_VERSION)
        return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memset(info->ibGuid, 0, sizeof info->ibGuid);
    for (int i = 0; i < 8; i++) info->ibGuid[i] = (unsigned char)((unsigned long long)d->plat_guid >> (56 - 8 * i));
    memset(info->chassisSerialNumber, 0, sizeof info->chassisSerialNumber);
    memcpy(info->chassisSerialNumber, d->chassis_serial, strnlen(d->chassis_serial, sizeof d->chassis_serial));
    info->slotNumber = (unsigned char)d->plat_slot;
    info->trayIndex = (unsigned char)d->plat_tray;
    info->hostId = (unsigned char)d->plat_host;
    info->peerType = (unsigned char)d->plat_peer;
    info->moduleId = (unsigned char)d->plat_module;
    return done(NVML_SUCCESS);
}

/* ---- processes ------------------------------------------------------------------------------------ */
/* The samples newer than lastSeen (NOT_FOUND when none), then sample_pad zero-filled entries; NOT_SUPPORTED in MIG
 * mode, as the driver answers. The two-call protocol: a NULL or short buffer gets INSUFFICIENT_SIZE and the count. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *count, unsigned long long lastSeen) {
    ENTER_DEVICE(nvmlDeviceGetProcessUtilization, device);
    if (!count) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (d->mig_cur) return done(NVML_ERROR_NOT_SUPPORTED);
    unsigned fresh = 0;
    for (int i = 0; i < d->nsamples; i++)
        if (d->samples[i].timeStamp > lastSeen) fresh++;
    if (!fresh) return done(NVML_ERROR_NOT_FOUND);
    unsigned n = fresh + (unsigned)d->sample_pad;
    if (!utilization || *count < n) {
        *count = n;
        return done(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (int i = 0; i < d->nsamples; i++)
        if (d->samples[i].timeStamp > lastSeen) utilization[k++] = d->samples[i];
    for (; k < n; k++) memset(&utilization[k], 0, sizeof utilization[k]);
    *count = n;
    return done(NVML_SUCCESS);
}

/* The compute (mps = 0) or MPS client (mps = 1) processes, with NVML's two-call protocol. The lock is held. */
static nvmlReturn_t list_processes(const FakeDevice *d, int mps, unsigned int *count, nvmlProcessInfo_t *infos) {
    if (!count) return done(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (int i = 0; i < d->nprocs; i++) n += d->procs[i].mps == mps;
    if (!infos || *count < n) {
        *count = n;
        return done(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    unsigned k = 0;
    for (int i = 0; i < d->nprocs; i++) {
        if (d->procs[i].mps != mps) continue;
        infos[k].pid = d->procs[i].pid;
        infos[k].usedGpuMemory = d->procs[i].memory;
        infos[k].gpuInstanceId = d->procs[i].gi;
        infos[k].computeInstanceId = d->procs[i].ci;
        k++;
    }
    *count = n;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    ENTER_DEVICE(nvmlDeviceGetComputeRunningProcesses_v3, device);
    return list_processes(d, 0, count, infos);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                        nvmlProcessInfo_t *infos) {
    ENTER_DEVICE(nvmlDeviceGetMPSComputeRunningProcesses_v3, device);
    return list_processes(d, 1, count, infos);
}

/* ---- MIG ---------------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    ENTER_DEVICE(nvmlDeviceGetMigDeviceHandleByIndex, device);
    if (!mig || d->parent >= 0 || index >= (unsigned)d->max_mig || index >= MAX_MIG_SLOTS)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->mig_cur) return done(NVML_ERROR_NOT_SUPPORTED);
    if (d->slots[index] < 0) return done(NVML_ERROR_NOT_FOUND);
    *mig = &g_devs[d->slots[index]];
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    ENTER_DEVICE(nvmlDeviceGetGpuInstanceById, device);
    if (!gpuInstance || d->parent >= 0) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->mig_cur) return done(NVML_ERROR_NOT_SUPPORTED);
    for (int s = 0; s < MAX_MIG_SLOTS; s++) {
        if (d->slots[s] < 0 || (unsigned)g_devs[d->slots[s]].gi_id != id) continue;
        *gpuInstance = &g_devs[d->slots[s]];
        return done(NVML_SUCCESS);
    }
    return done(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    ENTER_DEVICE(nvmlGpuInstanceGetInfo, gpuInstance);
    if (!info || d->parent < 0) return done(NVML_ERROR_INVALID_ARGUMENT);
    info->device = &g_devs[d->parent];
    info->id = (unsigned)d->gi_id;
    info->profileId = (unsigned)d->gi_profile;
    info->placement.start = (unsigned)d->placement_start;
    info->placement.size = (unsigned)d->placement_size;
    return done(NVML_SUCCESS);
}

/* ---- GPM ---------------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    ENTER_DEVICE(nvmlGpmQueryDeviceSupport, device);
    if (!support) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (support->version != 1) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    support->isSupportedDevice = d->gpm_supported ? 1 : 0;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    ENTER(nvmlGpmSampleAlloc);
    if (!sample) return done(NVML_ERROR_INVALID_ARGUMENT);
    FakeGpmSample *s = calloc(1, sizeof *s);
    if (!s) return done(NVML_ERROR_UNKNOWN);
    s->magic = SAMPLE_MAGIC;
    s->device = -1;
    *sample = s;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    ENTER(nvmlGpmSampleFree);
    if (!sample || sample->magic != SAMPLE_MAGIC) return done(NVML_ERROR_INVALID_ARGUMENT);
    sample->magic = 0;
    free(sample);
    return done(NVML_SUCCESS);
}

static FakeDevice *gpm_instance(int parent, unsigned gi) {
    for (int s = 0; s < MAX_MIG_SLOTS; s++) {
        int k = g_devs[parent].slots[s];
        if (k >= 0 && (unsigned)g_devs[k].gi_id == gi) return &g_devs[k];
    }
    return NULL;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gi, nvmlGpmSample_t sample) {
    ENTER_DEVICE(nvmlGpmMigSampleGet, device);
    if (!sample || sample->magic != SAMPLE_MAGIC || d->parent >= 0) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->gpm_supported) return done(NVML_ERROR_NOT_SUPPORTED);
    int k = (int)(d - g_devs);
    if (!gpm_instance(k, gi)) return done(NVML_ERROR_NOT_FOUND);
    sample->device = k;
    sample->gi = gi;
    sample->taken_ns = now_ns();
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    ENTER_DEVICE(nvmlGpmSampleGet, device);
    if (!sample || sample->magic != SAMPLE_MAGIC || d->parent >= 0) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->gpm_supported) return done(NVML_ERROR_NOT_SUPPORTED);
    sample->device = (int)(d - g_devs);
    sample->gi = GPM_WHOLE_GPU;
    sample->taken_ns = now_ns();
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    ENTER(nvmlGpmMetricsGet);
    if (!request) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (request->version != 1) return done(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    FakeGpmSample *a = request->sample1, *b = request->sample2;
    if (!a || !b || a->magic != SAMPLE_MAGIC || b->magic != SAMPLE_MAGIC || a->device < 0 || a->device != b->device ||
        a->gi != b->gi || b->taken_ns < a->taken_ns || request->numMetrics > 477)
        return done(NVML_ERROR_INVALID_ARGUMENT);
    FakeDevice *m = a->gi == GPM_WHOLE_GPU ? &g_devs[a->device] : gpm_instance(a->device, a->gi);
    if (!m) return done(NVML_ERROR_NOT_FOUND);
    for (unsigned i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &request->metrics[i];
        unsigned id = metric->metricId;
        metric->nvmlReturn = NVML_SUCCESS;
        metric->shortName = metric->longName = metric->unit = "";
        switch (id) {
        case 1: metric->value = m->gpm_graphics; break;
        case 2: metric->value = m->gpm_sm; break;
        case 3: metric->value = m->gpm_occupancy; break;
        case 5: metric->value = m->gpm_tensor; break;
        case 10: metric->value = m->gpm_dram; break;
        case 20: metric->value = m->gpm_tx; break;
        case 21: metric->value = m->gpm_rx; break;
        default: metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; break;
        }
        if (id < 512 && g_gpm_rc[id]) metric->nvmlReturn = g_gpm_rc[id];
    }
    return done(NVML_SUCCESS);
}

/* ---- events --------------------------------------------------------------------------------------- */
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER(nvmlEventSetCreate);
    if (!set) return done(NVML_ERROR_INVALID_ARGUMENT);
    FakeEventSet *s = calloc(1, sizeof *s);
    if (!s) return done(NVML_ERROR_UNKNOWN);
    s->magic = SET_MAGIC;
    *set = s;
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    ENTER_DEVICE(nvmlDeviceRegisterEvents, device);
    if (!set || set->magic != SET_MAGIC) return done(NVML_ERROR_INVALID_ARGUMENT);
    if (!(types & 0x8ULL) || !d->xid_supported) return done(NVML_ERROR_NOT_SUPPORTED);
    set->registered[d - g_devs] = 1;
    if (g_storm_pending > 0) {
        static const unsigned codes[] = {13, 31, 43, 48, 63, 79, 119};
        for (int i = 0; i < g_storm_pending; i++) push_event(g_top[i % g_ntop], codes[i % 7]);
        g_storm_pending = 0;
    }
    return done(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    ENTER(nvmlEventSetWait_v2);
    if (!set || set->magic != SET_MAGIC || !data) return done(NVML_ERROR_INVALID_ARGUMENT);
    long long deadline = now_ns() + (long long)timeoutms * 1000000LL;
    for (;;) {
        poll_control_file();
        while (g_event_count > 0) {
            int device = g_events[g_event_head].device;
            unsigned long long xid = g_events[g_event_head].xid;
            g_event_head = (g_event_head + 1) % MAX_EVENTS;
            g_event_count--;
            if (!set->registered[device]) continue; /* nobody listens: the event is gone */
            data->device = &g_devs[device];
            data->eventType = 0x8ULL;
            data->eventData = xid;
            data->gpuInstanceId = NO_INSTANCE;
            data->computeInstanceId = NO_INSTANCE;
            return done(NVML_SUCCESS);
        }
        long long now = now_ns();
        if (now >= deadline) return done(NVML_ERROR_TIMEOUT);
        long long slice = deadline - now < 50000000LL ? deadline - now : 50000000LL;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += slice;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&g_events_cond, &g_lock, &until);
    }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    ENTER(nvmlEventSetFree);
    if (!set || set->magic != SET_MAGIC) return done(NVML_ERROR_INVALID_ARGUMENT);
    set->magic = 0;
    free(set);
    return done(NVML_SUCCESS);
}

/* ---- test control ------------------------------------------------------------------------------ */
int fakeNvmlCommand(const char *line) {
    lock();
    int rc = run_command(line);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

unsigned long fakeNvmlCallCount(const char *function) {
    lock();
    int fn = function_id(function);
    unsigned long calls = fn < 0 ? 0 : g_calls[fn];
    pthread_mutex_unlock(&g_lock);
    return calls;
}

void fakeNvmlResetCallCounts(void) {
    lock();
    memset(g_calls, 0, sizeof g_calls);
    pthread_mutex_unlock(&g_lock);
}

int fakeNvmlRefcount(void) {
    lock();
    int refcount = g_refcount;
    pthread_mutex_unlock(&g_lock);
    return refcount;
}

int fakeNvmlPendingEvents(void) {
    lock();
    int pending = g_event_count;
    pthread_mutex_unlock(&g_lock);
    return pending;
}

size_t fakeNvmlSizeof(const char *name) {
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
        {"nvmlPciInfoExt_v1_t", sizeof(nvmlPciInfoExt_t)},
        {"c_nvmlMemory_t", sizeof(nvmlMemory_t)},
        {"c_nvmlMemory_v2_t", sizeof(nvmlMemory_v2_t)},
        {"c_nvmlUtilization_t", sizeof(nvmlUtilization_t)},
        {"c_nvmlTemperature_v1_t", sizeof(nvmlTemperature_v1_t)},
        {"c_nvmlMarginTemperature_v1_t", sizeof(nvmlMarginTemperature_t)},
        {"c_nvmlDeviceAddressingMode_t", sizeof(nvmlVersionedValue_t)},
        {"c_nvmlDramEncryptionInfo_t", sizeof(nvmlVersionedValue_t)},
        {"c_nvmlEccSramErrorStatus_v1_t", sizeof(nvmlEccSramErrorStatus_t)},
        {"c_nvmlRemappedRowsInfo_v2_t", sizeof(nvmlRemappedRowsInfo_v2_t)},
        {"c_nvmlRowRemapperHistogramValues", sizeof(nvmlRowRemapperHistogramValues_t)},
        {"c_nvmlC2cModeInfo_v1_t", sizeof(nvmlC2cModeInfo_t)},
        {"c_nvmlGpuFabricInfo_v2_t", offsetof(nvmlGpuFabricInfo_t, healthSummary)},
        {"c_nvmlPlatformInfo_v2_t", sizeof(nvmlPlatformInfo_t)},
        {"c_nvmlHostname_v1_t", sizeof(nvmlHostname_t)},
        {"c_nvmlProcessInfo_v3_t", sizeof(nvmlProcessInfo_t)},
        {"c_nvmlProcessUtilizationSample_t", sizeof(nvmlProcessUtilizationSample_t)},
        {"c_nvmlFieldValue_t", sizeof(nvmlFieldValue_t)},
        {"c_nvmlEventData_t", sizeof(nvmlEventData_t)},
        {"c_nvmlGpmSupport_t", sizeof(nvmlGpmSupport_t)},
        {"c_nvmlGpmMetricsGet_t", sizeof(nvmlGpmMetricsGet_t)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, name) == 0) return sizes[i].size;
    return 0;
}
