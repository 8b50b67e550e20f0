/*
 * A fake libnvidia-ml.so.1 for tests: the real nvidia-ml-py loads it through ctypes
 * (dlopen honours LD_LIBRARY_PATH), so the code path of a GPU runner runs without a GPU.
 *
 * It is compiled with NVIDIA's own nvml.h (the nvidia-nvml-dev wheel; testkit/cuda_env.py
 * finds it) and NVML_NO_UNVERSIONED_FUNC_DEFS, so every entry point below is checked against
 * the header's prototype for its exported (versioned) name, and every struct is the
 * header's. Behaviour follows the header's documentation comments; each case cites them as
 * `nvml.h: "..."` (nvidia-nvml-dev 13.5.37).
 *
 * Configuration: FAKE_NVML_CONFIG names a file of `key=value` lines, e.g.
 *   driver_version=580.159.04
 *   cuda_driver_version=13000  the CUDA version built into this driver: the driver's
 *                              libcuda (fake_cuda.c) answers it, and so does
 *                              nvmlSystemGetCudaDriverVersion when no libcuda loads
 *   driver.generation=r535early  _v3 process entries written 32 bytes apart (early R535);
 *                              R470 (no _v3 symbol at all) is a build: -DFAKE_NVML_NO_V3
 *   privileged=1               the caller may read MIG parents' aggregate information
 *                              (default 0: a CI job is not root)
 *   container=1                processes are reported with host PIDs (another PID namespace)
 *   gpu.count=1                in a container: the injected GPUs only, numbered from 0
 *   gpu.0.name=NVIDIA H200
 *   gpu.0.uuid=GPU-...
 *   gpu.0.cc=9.0
 *   gpu.0.memory_mib=143771
 *   gpu.0.brand=2            (nvmlBrandType_t)
 *   gpu.0.mig=1              gpu.0.mig.count=2   gpu.0.mig.0.uuid=MIG-...
 *   gpu.0.mig.0.name=...     gpu.0.mig.0.memory_mib=9984   gpu.0.mig.0.processes=1
 *   gpu.0.persistence=1      gpu.0.ecc_uncorrected=0   gpu.0.retired_pending=0
 *   gpu.0.remap_pending=0    gpu.0.remap_failure=0     gpu.0.processes=0
 *   gpu.0.util_samples=6     the driver's utilisation sample buffer holds 6 entries per
 *                            step (nvmlDeviceGetSamples; default 0: NOT_SUPPORTED)
 *   gpu.0.energy_counter=1   nvmlDeviceGetTotalEnergyConsumption is supported (Volta+)
 *   gpu.0.violation=1        nvmlDeviceGetViolationStatus is supported
 *   gpu.0.reserved_mib=500   memory the driver reserves: in v1's `used`, apart in v2
 *   gpu.0.ecc=0              no ECC (a consumer board): ECC counts are NOT_SUPPORTED
 *   gpu.0.remap=0            no row remapping (before Ampere): NOT_SUPPORTED
 *   gpu.0.pcie_counters=1    NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES answer (else NOT_SUPPORTED)
 *   gpu.0.nvlink=1           NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX} answer
 *   gpu.0.event_types=0x..   the nvmlEventType* bits nvmlDeviceGetSupportedEventTypes
 *                            answers (default: single/double-bit ECC and Xid)
 *   GPM (nvmlGpm*) is supported where gpu.N.cc is 9.0 or more (Hopper and newer)
 *   fail.<nvml function name>=<nvmlReturn_t>   (that function returns the code)
 * Every call is appended to FAKE_NVML_LOG when set, so tests can assert what ran.
 *
 * Time series (gpu-monitor): FAKE_NVML_SCRIPT names a file of `<step> key=value ...` lines;
 * see the "scripted time series" section at the end of this file.
 *
 * Allocations (the pytest plugin): FAKE_NVML_LEDGER names a directory that plays the
 * driver's table of per-process device memory, shared by every process of the machine; see
 * the "ledger" section at the end of this file.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* declare v1/_v2 too: each exported name is checked */
#include <nvml.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
#define MAX_MIG 8
#define MAX_FAILS 64
#define HOST_PID_BASE 3000000u /* container=1: PIDs of the host's namespace */

typedef struct {
    char name[96];
    char uuid[96];
    int cc_major, cc_minor;
    unsigned long long memory_mib;
    int brand, mig, mig_count, persistence, retired_pending, remap_pending, remap_failure;
    unsigned long long ecc_uncorrected;
    unsigned int processes;
    char mig_uuid[MAX_MIG][96];
    char mig_name[MAX_MIG][96];
    unsigned long long mig_memory_mib[MAX_MIG];
    unsigned int mig_processes[MAX_MIG];
    unsigned int util_samples; /* driver sample-buffer entries per step (0: unsupported) */
    int energy_counter;        /* nvmlDeviceGetTotalEnergyConsumption supported */
    int violation;             /* nvmlDeviceGetViolationStatus supported */
    unsigned long long reserved_mib; /* memory the driver reserves (nvmlMemory_v2_t) */
    int no_ecc, no_remap, pcie_counters, nvlink;
    unsigned long long event_types, registered;
} gpu_t;

static struct {
    int loaded;
    int initialized;
    char driver_version[80];
    int cuda_driver_version;
    int stride32; /* driver.generation=r535early */
    int privileged;
    int container;
    unsigned int gpu_count;
    gpu_t gpus[MAX_GPUS];
    char fail_name[MAX_FAILS][64];
    int fail_code[MAX_FAILS];
    int fails;
} cfg;

static void log_call(const char *name) {
    const char *path = getenv("FAKE_NVML_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

static void set_key(const char *key, const char *value) {
    unsigned int i, m;
    char rest[128];
    if (!strcmp(key, "driver_version")) {
        snprintf(cfg.driver_version, sizeof cfg.driver_version, "%s", value);
    } else if (!strcmp(key, "cuda_driver_version")) {
        cfg.cuda_driver_version = atoi(value);
    } else if (!strcmp(key, "driver.generation")) {
        cfg.stride32 = !strcmp(value, "r535early");
    } else if (!strcmp(key, "privileged")) {
        cfg.privileged = atoi(value);
    } else if (!strcmp(key, "container")) {
        cfg.container = atoi(value);
    } else if (!strcmp(key, "gpu.count")) {
        cfg.gpu_count = (unsigned)atoi(value);
        if (cfg.gpu_count > MAX_GPUS) cfg.gpu_count = MAX_GPUS;
    } else if (!strncmp(key, "fail.", 5) && cfg.fails < MAX_FAILS) {
        snprintf(cfg.fail_name[cfg.fails], 64, "%.63s", key + 5);
        cfg.fail_code[cfg.fails++] = atoi(value);
    } else if (sscanf(key, "gpu.%u.mig.%u.%127s", &i, &m, rest) == 3 && i < MAX_GPUS &&
               m < MAX_MIG) {
        if (!strcmp(rest, "uuid")) snprintf(cfg.gpus[i].mig_uuid[m], 96, "%s", value);
        else if (!strcmp(rest, "name")) snprintf(cfg.gpus[i].mig_name[m], 96, "%s", value);
        else if (!strcmp(rest, "memory_mib"))
            cfg.gpus[i].mig_memory_mib[m] = strtoull(value, NULL, 10);
        else if (!strcmp(rest, "processes"))
            cfg.gpus[i].mig_processes[m] = (unsigned)atoi(value);
    } else if (sscanf(key, "gpu.%u.%127s", &i, rest) == 2 && i < MAX_GPUS) {
        gpu_t *g = &cfg.gpus[i];
        if (!strcmp(rest, "name")) snprintf(g->name, 96, "%s", value);
        else if (!strcmp(rest, "uuid")) snprintf(g->uuid, 96, "%s", value);
        else if (!strcmp(rest, "cc")) sscanf(value, "%d.%d", &g->cc_major, &g->cc_minor);
        else if (!strcmp(rest, "memory_mib")) g->memory_mib = strtoull(value, NULL, 10);
        else if (!strcmp(rest, "brand")) g->brand = atoi(value);
        else if (!strcmp(rest, "mig")) g->mig = atoi(value);
        else if (!strcmp(rest, "mig.count")) g->mig_count = atoi(value);
        else if (!strcmp(rest, "persistence")) g->persistence = atoi(value);
        else if (!strcmp(rest, "ecc_uncorrected")) g->ecc_uncorrected = strtoull(value, NULL, 10);
        else if (!strcmp(rest, "retired_pending")) g->retired_pending = atoi(value);
        else if (!strcmp(rest, "remap_pending")) g->remap_pending = atoi(value);
        else if (!strcmp(rest, "remap_failure")) g->remap_failure = atoi(value);
        else if (!strcmp(rest, "processes")) g->processes = (unsigned)atoi(value);
        else if (!strcmp(rest, "util_samples")) g->util_samples = (unsigned)atoi(value);
        else if (!strcmp(rest, "energy_counter")) g->energy_counter = atoi(value);
        else if (!strcmp(rest, "violation")) g->violation = atoi(value);
        else if (!strcmp(rest, "reserved_mib")) g->reserved_mib = strtoull(value, NULL, 10);
        else if (!strcmp(rest, "ecc")) g->no_ecc = !atoi(value);
        else if (!strcmp(rest, "remap")) g->no_remap = !atoi(value);
        else if (!strcmp(rest, "pcie_counters")) g->pcie_counters = atoi(value);
        else if (!strcmp(rest, "nvlink")) g->nvlink = atoi(value);
        else if (!strcmp(rest, "event_types")) g->event_types = strtoull(value, NULL, 0);
    }
}

static void load(void) {
    char line[512];
    const char *path;
    FILE *f;
    if (cfg.loaded) return;
    cfg.loaded = 1;
    snprintf(cfg.driver_version, sizeof cfg.driver_version, "580.159.04");
    cfg.cuda_driver_version = 13000;
    path = getenv("FAKE_NVML_CONFIG");
    if (!path || !(f = fopen(path, "r"))) return;
    while (fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '='), *end;
        if (!eq || line[0] == '#') continue;
        *eq = '\0';
        end = eq + 1 + strcspn(eq + 1, "\r\n");
        *end = '\0';
        set_key(line, eq + 1);
    }
    fclose(f);
}

/* Log the call, then return the injected error for it, or 0. */
static nvmlReturn_t enter(const char *name) {
    int k;
    load();
    log_call(name);
    for (k = 0; k < cfg.fails; k++)
        if (!strcmp(cfg.fail_name[k], name)) return (nvmlReturn_t)cfg.fail_code[k];
    return NVML_SUCCESS;
}

#define ENTER(name)                          \
    do {                                     \
        nvmlReturn_t rc_ = enter(name);      \
        if (rc_ != NVML_SUCCESS) return rc_; \
    } while (0)

/* Scripted time series (defined at the end of the file). */
typedef struct {
    unsigned int pid;
    unsigned long long used;
} proc_t;
static nvmlReturn_t fake_script_memory(gpu_t *g, int mig, nvmlMemory_t *mem);
static int fake_script_processes(gpu_t *g, int mig, proc_t *out, unsigned int cap,
                                 unsigned int *n, nvmlReturn_t *rc);
static unsigned long long fake_script_count(gpu_t *g, const char *key);
static unsigned int ledger_processes(gpu_t *g, int mig, proc_t *out, unsigned int cap,
                                     unsigned int n);
static unsigned long long ledger_bytes(gpu_t *g, int mig);
static int ledger_name(unsigned int pid, char *name, size_t length);

/* Handles: GPU i is (i + 1); MIG device m of GPU i is 0x1000 + i * 64 + m. */
static gpu_t *gpu_of(nvmlDevice_t dev, int *mig) {
    uintptr_t h = (uintptr_t)dev;
    *mig = -1;
    if (h >= 0x1000) {
        h -= 0x1000;
        *mig = (int)(h % 64);
        h = h / 64 + 1;
    }
    if (h < 1 || h > cfg.gpu_count) return NULL;
    return &cfg.gpus[h - 1];
}

#define DEVICE(var, dev)                                            \
    int mig_ = -1;                                                  \
    gpu_t *var = gpu_of(dev, &mig_);                                \
    (void)mig_;                                                     \
    if (!cfg.initialized) return NVML_ERROR_UNINITIALIZED;          \
    if (!var) return NVML_ERROR_INVALID_ARGUMENT

/* nvml.h (nvmlDeviceGetMemoryInfo, nvmlDeviceGetComputeRunningProcesses_v3): "In MIG mode,
 * if device handle is provided, the API returns aggregate information, only if the caller
 * has appropriate privileges. Per-instance information can be queried by using specific MIG
 * device handles." and "NVML_ERROR_NO_PERMISSION if the user doesn't have permission to
 * perform this operation". */
#define MIG_PARENT_NEEDS_PRIVILEGES(g)                                                 \
    if (mig_ < 0 && (g)->mig && !cfg.privileged) return NVML_ERROR_NO_PERMISSION

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    ENTER("nvmlInitWithFlags");
    cfg.initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    ENTER("nvmlShutdown");
    cfg.initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER("nvmlSystemGetDriverVersion");
    if (!cfg.initialized) return NVML_ERROR_UNINITIALIZED;
    return copy_str(version, length, cfg.driver_version);
}

/* cuDriverGetVersion of the libcuda.so.1 the loader finds (the fake libcuda holds the CUDA
 * version), the way the real NVML reaches it. */
static nvmlReturn_t libcuda_version(int *v) {
    typedef int (*get_version_t)(int *);
    get_version_t fn;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return NVML_ERROR_LIBRARY_NOT_FOUND;
    fn = (get_version_t)(uintptr_t)dlsym(lib, "cuDriverGetVersion");
    if (!fn) {
        dlclose(lib);
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    if (fn(v) != 0) *v = 0;
    dlclose(lib);
    return NVML_SUCCESS;
}

/* nvml.h: "The returned CUDA driver version by calling cuDriverGetVersion()" ...
 * "NVML_ERROR_LIBRARY_NOT_FOUND if libcuda.so.1 or libcuda.dll is not found" ...
 * "NVML_ERROR_FUNCTION_NOT_FOUND if cuDriverGetVersion() is not found in the shared
 * library". So a container without libcuda (capabilities=utility) fails here, and with a
 * forward-compatibility libcuda first on the path this is the compat library's version. */
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion_v2");
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    return libcuda_version(v);
}

/* nvml.h: "The CUDA driver version returned will be retrieved from the currently installed
 * version of CUDA. If the cuda library is not found, this function will return a known
 * supported version number." (the driver's own, from the config). */
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion");
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    if (libcuda_version(v) != NVML_SUCCESS) *v = cfg.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER("nvmlDeviceGetCount_v2");
    if (!cfg.initialized) return NVML_ERROR_UNINITIALIZED;
    *count = cfg.gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    ENTER("nvmlDeviceGetHandleByIndex_v2");
    if (!cfg.initialized) return NVML_ERROR_UNINITIALIZED;
    if (index >= cfg.gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = (nvmlDevice_t)(uintptr_t)(index + 1);
    return NVML_SUCCESS;
}

/* nvml.h: "When used with MIG device handles the API returns MIG device names" */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length) {
    ENTER("nvmlDeviceGetName");
    DEVICE(g, dev);
    if (mig_ >= 0 && g->mig_name[mig_][0]) return copy_str(name, length, g->mig_name[mig_]);
    return copy_str(name, length, g->name);
}

/* nvml.h: "When used with MIG device handles the API returns globally unique UUIDs" */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length) {
    ENTER("nvmlDeviceGetUUID");
    DEVICE(g, dev);
    return copy_str(uuid, length, mig_ >= 0 ? g->mig_uuid[mig_] : g->uuid);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int *major, int *minor) {
    ENTER("nvmlDeviceGetCudaComputeCapability");
    DEVICE(g, dev);
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
    ENTER("nvmlDeviceGetMemoryInfo");
    DEVICE(g, dev);
    MIG_PARENT_NEEDS_PRIVILEGES(g);
    mem->total = g->memory_mib * 1024ULL * 1024ULL;
    if (mig_ >= 0 && g->mig_memory_mib[mig_]) mem->total = g->mig_memory_mib[mig_] * 1048576ULL;
    mem->used = 0;
    mem->free = mem->total;
    {
        /* nvml.h (nvmlMemory_t.used): "Sum of Reserved and Allocated device memory" */
        nvmlReturn_t rc = fake_script_memory(g, mig_, mem); /* scripted time series, if any */
        unsigned long long reserved = mig_ < 0 ? g->reserved_mib * 1048576ULL : 0;
        mem->used += reserved;
        mem->free = mem->total > mem->used ? mem->total - mem->used : 0;
        return rc;
    }
}

/* nvml.h (nvmlMemory_v2_t): "version: Structure format version (must be 2)", "reserved:
 * Device memory (in bytes) reserved for system use (driver or firmware)", "used: Allocated
 * device memory (in bytes)." */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem) {
    nvmlMemory_t v1;
    ENTER("nvmlDeviceGetMemoryInfo_v2");
    {
        DEVICE(g, dev);
        MIG_PARENT_NEEDS_PRIVILEGES(g);
        if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
        if (mem->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        v1.total = g->memory_mib * 1048576ULL;
        if (mig_ >= 0 && g->mig_memory_mib[mig_]) v1.total = g->mig_memory_mib[mig_] * 1048576ULL;
        v1.used = 0;
        v1.free = v1.total;
        {
            nvmlReturn_t rc = fake_script_memory(g, mig_, &v1);
            if (rc != NVML_SUCCESS) return rc;
        }
        mem->total = v1.total;
        mem->reserved = mig_ < 0 ? g->reserved_mib * 1048576ULL : 0;
        mem->used = v1.used;
        mem->free = mem->total > mem->used + mem->reserved ? mem->total - mem->used - mem->reserved
                                                           : 0;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t dev, nvmlBrandType_t *brand) {
    ENTER("nvmlDeviceGetBrand");
    DEVICE(g, dev);
    *brand = (nvmlBrandType_t)g->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending) {
    ENTER("nvmlDeviceGetMigMode");
    DEVICE(g, dev);
    *current = (unsigned)g->mig;
    *pending = (unsigned)g->mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count) {
    ENTER("nvmlDeviceGetMaxMigDeviceCount");
    DEVICE(g, dev);
    *count = (unsigned)g->mig_count;
    return NVML_SUCCESS;
}

/* nvml.h: "NVML_ERROR_NOT_SUPPORTED if this query is not supported by the device" ...
 * "NVML_ERROR_NOT_FOUND if no valid MIG device was found at index" */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index,
                                                 nvmlDevice_t *mig) {
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
    DEVICE(g, dev);
    if (!g->mig) return NVML_ERROR_NOT_SUPPORTED;
    if ((int)index >= g->mig_count) return NVML_ERROR_NOT_FOUND;
    *mig = (nvmlDevice_t)(uintptr_t)(0x1000 + ((uintptr_t)dev - 1) * 64 + index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, nvmlEnableState_t *mode) {
    ENTER("nvmlDeviceGetPersistenceMode");
    DEVICE(g, dev);
    *mode = g->persistence ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, nvmlMemoryErrorType_t error_type,
                                         nvmlEccCounterType_t counter_type,
                                         unsigned long long *count) {
    ENTER("nvmlDeviceGetTotalEccErrors");
    DEVICE(g, dev);
    /* nvml.h: "NVML_ERROR_NOT_SUPPORTED if the device does not support this feature" */
    if (g->no_ecc) return NVML_ERROR_NOT_SUPPORTED;
    /* nvml.h: "The total error count is the sum of errors across each of the separate memory
     * systems, i.e. the total set of errors across the entire device", and its device is
     * "The identifier of the target device": a board-level count. The calls that accept a
     * MIG device handle say so ("The device handle or MIG device handle"); this one does
     * not, so a MIG device handle is a device without the feature: NOT_SUPPORTED. */
    if (mig_ >= 0) return NVML_ERROR_NOT_SUPPORTED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    /* volatile counts: the config's uncorrected count, plus the script's gpu.N.ecc_sbe /
     * gpu.N.ecc_dbe (the counts since boot at this step) */
    *count = 0;
    if (counter_type == NVML_VOLATILE_ECC) {
        if (error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
            *count = g->ecc_uncorrected + fake_script_count(g, "ecc_dbe");
        else
            *count = fake_script_count(g, "ecc_sbe");
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev,
                                                    nvmlEnableState_t *pending) {
    ENTER("nvmlDeviceGetRetiredPagesPendingStatus");
    DEVICE(g, dev);
    *pending = g->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    ENTER("nvmlDeviceGetRemappedRows");
    DEVICE(g, dev);
    /* nvml.h: "NVML_ERROR_NOT_SUPPORTED If MIG is enabled or if the device doesn't support
     * this feature" ("On MIG-enabled GPUs with active instances, querying the number of
     * remapped rows is not supported"): the parent and its MIG device handles alike. */
    if (g->no_remap || g->mig) return NVML_ERROR_NOT_SUPPORTED;
    /* the script's gpu.N.remap_cor / gpu.N.remap_unc: rows remapped since manufacture */
    *corr = (unsigned)fake_script_count(g, "remap_cor");
    *unc = (unsigned)fake_script_count(g, "remap_unc");
    *pending = (unsigned)(g->remap_pending || fake_script_count(g, "remap_pending"));
    *failure = (unsigned)g->remap_failure;
    return NVML_SUCCESS;
}

/* ---- running compute processes, per driver generation ---------------------------------
 * The exported names and their entry structs (nvml.h, NVML_NO_UNVERSIONED_FUNC_DEFS):
 *   nvmlDeviceGetComputeRunningProcesses     nvmlProcessInfo_v1_t (pid, usedGpuMemory)
 *   nvmlDeviceGetComputeRunningProcesses_v2  nvmlProcessInfo_v2_t (+ GPU/compute instance)
 *   nvmlDeviceGetComputeRunningProcesses_v3  nvmlProcessInfo_t (= _v2_t, 24 bytes)
 * Drivers before R510 (R470) export no _v3 (built with -DFAKE_NVML_NO_V3); early R535
 * drivers wrote _v3 entries 32 bytes apart (a usedGpuCcProtectedMemory field the header
 * never shipped; driver.generation=r535early), so readers of the 24-byte struct see the
 * second and later entries misaligned. */

static unsigned int list_processes(gpu_t *g, int mig, proc_t *out, unsigned int cap,
                                   nvmlReturn_t *rc) {
    unsigned int n = 0, k, wanted = mig >= 0 ? g->mig_processes[mig] : g->processes;
    *rc = NVML_SUCCESS;
    if (fake_script_processes(g, mig, out, cap, &n, rc))
        return *rc == NVML_SUCCESS ? ledger_processes(g, mig, out, cap, n) : n;
    for (k = 0; k < wanted; k++, n++) {
        if (n >= cap) continue;
        /* container=1: NVML reports the host's PIDs, not this namespace's */
        out[n].pid = (cfg.container ? HOST_PID_BASE : 4242u) + (unsigned)(mig + 1) * 100 + k;
        out[n].used = 512ULL * 1024 * 1024;
    }
    return ledger_processes(g, mig, out, cap, n);
}

/* nvml.h: "To query the current number of running compute processes, call this function
 * with *infoCount = 0. The return code will be NVML_ERROR_INSUFFICIENT_SIZE, or
 * NVML_SUCCESS if none are running. For this call infos is allowed to be NULL." and
 * "NVML_ERROR_INSUFFICIENT_SIZE if infoCount indicates that the infos array is too small;
 * infoCount will contain minimal amount of space necessary". Writes `stride`-byte entries of
 * `size` bytes (pid, usedGpuMemory, then the instance ids when size > 16). */
static nvmlReturn_t running_processes(const char *name, nvmlDevice_t dev, unsigned int *count,
                                      void *infos, size_t stride, size_t size) {
    proc_t procs[64];
    unsigned int n, k, room;
    nvmlReturn_t rc;
    ENTER(name);
    {
        DEVICE(g, dev);
        MIG_PARENT_NEEDS_PRIVILEGES(g);
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        n = list_processes(g, mig_, procs, 64, &rc);
        if (rc != NVML_SUCCESS) return rc;
        if (n == 0) {
            *count = 0;
            return NVML_SUCCESS;
        }
        if (!infos || *count < n) {
            *count = n;
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        /* the caller's array holds *count entries of its struct; write no byte past it */
        room = (unsigned int)(((size_t)*count * size) / stride);
        for (k = 0; k < n && k < room && k < 64; k++) {
            unsigned char *at = (unsigned char *)infos + k * stride;
            nvmlProcessInfo_v2_t e;
            memset(&e, 0, sizeof e);
            e.pid = procs[k].pid;
            e.usedGpuMemory = procs[k].used;
            e.gpuInstanceId = mig_ >= 0 ? (unsigned)mig_ : 0xFFFFFFFFu;
            e.computeInstanceId = mig_ >= 0 ? 0u : 0xFFFFFFFFu;
            memset(at, 0, stride); /* early R535: the 8 bytes past the struct are 0 */
            if (size == sizeof(nvmlProcessInfo_v1_t)) {
                nvmlProcessInfo_v1_t v1;
                memset(&v1, 0, sizeof v1);
                v1.pid = e.pid;
                v1.usedGpuMemory = e.usedGpuMemory;
                memcpy(at, &v1, sizeof v1);
            } else {
                memcpy(at, &e, sizeof e);
            }
        }
        *count = n;
        return NVML_SUCCESS;
    }
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses", dev, count, infos,
                             sizeof(nvmlProcessInfo_v1_t), sizeof(nvmlProcessInfo_v1_t));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *count,
                                                     nvmlProcessInfo_v2_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v2", dev, count, infos,
                             sizeof(nvmlProcessInfo_v2_t), sizeof(nvmlProcessInfo_v2_t));
}

#ifndef FAKE_NVML_NO_V3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    load();
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v3", dev, count, infos,
                             cfg.stride32 ? 32 : sizeof(nvmlProcessInfo_t),
                             sizeof(nvmlProcessInfo_t));
}
#endif

/* ---- scripted time series (gpu-monitor) ------------------------------------------------
 * FAKE_NVML_SCRIPT names a file of lines `<step> key=value key=value ...` (`#` comments).
 * A key keeps its value until a later step sets it again. The step is the number of the
 * sample: it advances each time nvmlDeviceGetUtilizationRates is called for GPU 0 (a
 * sampler reads GPU 0's utilisation first in each sample), so tests control time by
 * counting samples, never by the wall clock. Keys, per GPU N:
 *   gpu.N.util, gpu.N.mem_util     percent              gpu.N.mem_used_mib   MiB
 *   gpu.N.power_mw  milliwatts     gpu.N.temp  deg C    gpu.N.sm_mhz  SM clock
 *   gpu.N.throttle  clocks-event reason bits (0x.. or decimal)
 *   gpu.N.procs     pid:MiB:name,pid:MiB:name  (or `-` for none)
 *   gpu.N.xid       an Xid critical-error event delivered once at this step
 *   gpu.N.lost=1    from this step on, every call for GPU N returns NVML_ERROR_GPU_IS_LOST
 *   gpu.N.error=C   from this step on, nvmlDeviceGetUtilizationRates answers nvmlReturn_t C
 *                   (a transient error; gpu.N.error=0 ends it)
 *   gpu.N.sm, .occupancy, .tensor, .dram   GPM ratios (percent; Hopper and newer)
 *   gpu.N.pcie_tx_mib, .pcie_rx_mib, .nvlink_tx_mib, .nvlink_rx_mib   MiB a step moves
 *   gpu.N.ecc_sbe, .ecc_dbe   volatile ECC counts since boot at this step
 *   gpu.N.remap_cor, .remap_unc, .remap_pending   remapped rows at this step
 *   gpu.N.event=0x..  an event of that nvmlEventType bit, delivered once if registered
 *   gpu.N.buf_util  percent in the driver's sample buffer for this step (default: util)
 *   gpu.N.viol_power_ms, gpu.N.viol_thermal_ms   violation time a step adds to that
 *                   counter besides the seconds whose throttle bits name it (a slowdown
 *                   between two readings)
 * and per MIG slot M of GPU N (read through the MIG device handle; the GPU instance id of
 * slot M is M):
 *   gpu.N.mig.M.mem_used_mib   gpu.N.mig.M.procs   gpu.N.mig.M.util (GPM)
 *   gpu.N.mig.M.xid            an Xid attributed to that GPU instance
 * One step is one second of the driver's clock (timestamps, energy, buffers).
 */
#include <time.h>

#define MAX_ROWS 4096

static struct {
    int loaded;
    int rows;
    unsigned int step[MAX_ROWS];
    unsigned int gpu[MAX_ROWS];
    char key[MAX_ROWS][32];
    char value[MAX_ROWS][160];
    int delivered[MAX_ROWS];
    long long now; /* current step; -1 before the first sample */
} scr = {0, 0, {0}, {0}, {{0}}, {{0}}, {0}, -1};

static void script_load(void) {
    char line[2048];
    const char *path;
    FILE *f;
    load();
    if (scr.loaded) return;
    scr.loaded = 1;
    path = getenv("FAKE_NVML_SCRIPT");
    if (!path || !*path || !(f = fopen(path, "r"))) return;
    while (fgets(line, sizeof line, f)) {
        char *tok, *save = NULL;
        unsigned int step;
        if (line[0] == '#' || sscanf(line, "%u", &step) != 1) continue;
        tok = strtok_r(line, " \t\r\n", &save); /* the step itself */
        while ((tok = strtok_r(NULL, " \t\r\n", &save)) && scr.rows < MAX_ROWS) {
            unsigned int n;
            char k[32];
            char *eq = strchr(tok, '=');
            if (!eq || sscanf(tok, "gpu.%u.%31[a-z_0-9.]", &n, k) != 2) continue;
            scr.step[scr.rows] = step;
            scr.gpu[scr.rows] = n;
            snprintf(scr.key[scr.rows], 32, "%s", k);
            snprintf(scr.value[scr.rows], 160, "%s", eq + 1);
            scr.rows++;
        }
    }
    fclose(f);
}

static int gpu_number(gpu_t *g) { return (int)(g - cfg.gpus); }

/* The latest value of `key` for GPU `n` at step `at`, or NULL. */
static const char *script_get_at(int n, const char *key, long long at) {
    const char *found = NULL;
    int r;
    script_load();
    for (r = 0; r < scr.rows; r++)
        if ((long long)scr.step[r] <= at && (int)scr.gpu[r] == n && !strcmp(scr.key[r], key))
            found = scr.value[r];
    return found;
}

/* The latest value of `key` for GPU `n` at the current step, or NULL. */
static const char *script_get(int n, const char *key) { return script_get_at(n, key, scr.now); }

/* `key`, or `mig.M.key` for MIG slot M >= 0. */
static const char *script_key(char *buf, size_t len, int mig, const char *key) {
    if (mig < 0) snprintf(buf, len, "%s", key);
    else snprintf(buf, len, "mig.%d.%s", mig, key);
    return buf;
}

static unsigned long long script_num(int n, const char *key, unsigned long long dflt) {
    const char *v = script_get(n, key);
    return v ? strtoull(v, NULL, 0) : dflt;
}

static int script_lost(gpu_t *g) { return script_num(gpu_number(g), "lost", 0) != 0; }

/* A scripted counter's value at the current step (0 before the script sets it). */
static unsigned long long fake_script_count(gpu_t *g, const char *key) {
    script_load();
    return script_num(gpu_number(g), key, 0);
}

#define SCRIPTED(var, dev)              \
    DEVICE(var, dev);                   \
    script_load();                      \
    if (script_lost(var)) return NVML_ERROR_GPU_IS_LOST

static nvmlReturn_t fake_script_memory(gpu_t *g, int mig, nvmlMemory_t *mem) {
    const char *v;
    char key[32];
    script_load();
    if (script_lost(g)) return NVML_ERROR_GPU_IS_LOST;
    /* a MIG device handle: that instance's memory only (nvml.h: "Per-instance information
     * can be queried by using specific MIG device handles") */
    v = script_get(gpu_number(g), script_key(key, sizeof key, mig, "mem_used_mib"));
    if (v) mem->used = strtoull(v, NULL, 10) * 1024ULL * 1024ULL;
    else mem->used += ledger_bytes(g, mig); /* what the ledger's processes hold */
    mem->free = mem->total > mem->used ? mem->total - mem->used : 0;
    return NVML_SUCCESS;
}

/* Lists `procs` when the script sets it (returns 1, *rc = the NVML code). */
static int fake_script_processes(gpu_t *g, int mig, proc_t *out, unsigned int cap,
                                 unsigned int *n, nvmlReturn_t *rc) {
    char buf[160], key[32], *tok, *save = NULL;
    const char *v;
    script_load();
    *n = 0;
    if (script_lost(g)) { *rc = NVML_ERROR_GPU_IS_LOST; return 1; }
    v = script_get(gpu_number(g), script_key(key, sizeof key, mig, "procs"));
    if (!v) return 0;
    snprintf(buf, sizeof buf, "%s", v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned int pid;
        unsigned long long mib;
        if (sscanf(tok, "%u:%llu", &pid, &mib) != 2) continue;
        if (*n < cap) {
            /* container=1: NVML reports the host's PID of the scripted process */
            out[*n].pid = cfg.container ? HOST_PID_BASE + pid : pid;
            out[*n].used = mib * 1024ULL * 1024ULL;
        }
        (*n)++;
    }
    *rc = NVML_SUCCESS;
    return 1;
}


nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util) {
    if ((uintptr_t)dev == 1) scr.now++; /* GPU 0 opens a sample (even when it fails) */
    ENTER("nvmlDeviceGetUtilizationRates");
    {
        SCRIPTED(g, dev);
        /* nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently
         * supported." */
        if (g->mig) return NVML_ERROR_NOT_SUPPORTED;
        /* gpu.N.error=<nvmlReturn_t>: from this step the sample's first call fails with it
         * (a transient driver error, e.g. 999 UNKNOWN or 10 TIMEOUT; 0 ends it) */
        if (script_num(gpu_number(g), "error", 0))
            return (nvmlReturn_t)script_num(gpu_number(g), "error", 0);
        util->gpu = (unsigned)script_num(gpu_number(g), "util", 0);
        util->memory = (unsigned)script_num(gpu_number(g), "mem_util", 0);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) {
    ENTER("nvmlDeviceGetPowerUsage");
    {
        SCRIPTED(g, dev);
        *mw = (unsigned)script_num(gpu_number(g), "power_mw", 70000);
    }
    return NVML_SUCCESS;
}

/* nvml.h: DEPRECATED(13.0) "Use nvmlDeviceGetTemperatureV instead" (drivers still export
 * it; nvidia-ml-py's nvmlDeviceGetTemperature calls it). */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, nvmlTemperatureSensors_t sensor,
                                      unsigned int *temp) {
    ENTER("nvmlDeviceGetTemperature");
    (void)sensor;
    {
        SCRIPTED(g, dev);
        *temp = (unsigned)script_num(gpu_number(g), "temp", 35);
    }
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_NO_NVML13_NAMES
/* nvml.h: nvmlDeviceGetTemperatureV, the replacement of the DEPRECATED(13.0)
 * nvmlDeviceGetTemperature: a versioned nvmlTemperature_t in, its temperature out. A driver
 * of the r470 generation predates it (built with -DFAKE_NVML_NO_NVML13_NAMES). */
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_t *temperature) {
    ENTER("nvmlDeviceGetTemperatureV");
    if (temperature == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    {
        SCRIPTED(g, dev);
        temperature->temperature = (int)script_num(gpu_number(g), "temp", 35);
    }
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, nvmlClockType_t type, unsigned int *mhz) {
    ENTER("nvmlDeviceGetClockInfo");
    (void)type;
    {
        SCRIPTED(g, dev);
        *mhz = (unsigned)script_num(gpu_number(g), "sm_mhz", 1980);
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t clocks_reasons(nvmlDevice_t dev, unsigned long long *reasons) {
    SCRIPTED(g, dev);
    *reasons = script_num(gpu_number(g), "throttle", 0);
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_NO_NVML13_NAMES
/* A driver before R535 has no ...EventReasons (the renamed call): a test injects
 * fail.nvmlDeviceGetCurrentClocksEventReasons=13 (NVML_ERROR_FUNCTION_NOT_FOUND, what
 * nvidia-ml-py raises for a symbol the library lacks); ...ThrottleReasons still answers. */
/* nvml.h: the replacement of the DEPRECATED(13.0) ...ClocksThrottleReasons (same bits);
 * absent from the r470 generation, whose nvml.h has only the throttle name. */
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev,
                                                    unsigned long long *reasons) {
    ENTER("nvmlDeviceGetCurrentClocksEventReasons");
    return clocks_reasons(dev, reasons);
}
#endif

/* nvml.h: DEPRECATED(13.0); the same bits as nvmlDeviceGetCurrentClocksEventReasons. */
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev,
                                                       unsigned long long *reasons) {
    ENTER("nvmlDeviceGetCurrentClocksThrottleReasons");
    return clocks_reasons(dev, reasons);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    unsigned int n;
    ENTER("nvmlSystemGetProcessName");
    script_load();
    /* every scripted process of this namespace: a GPU's and its MIG devices' (mig.M.procs) */
    for (n = 0; n < cfg.gpu_count; n++) {
        int m;
        for (m = -1; m < MAX_MIG; m++) {
            char buf[160], key[32], *tok, *save = NULL;
            const char *v = script_get((int)n, script_key(key, sizeof key, m, "procs"));
            if (!v) continue;
            snprintf(buf, sizeof buf, "%s", v);
            for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                unsigned int p;
                char pname[96];
                if (sscanf(tok, "%u:%*u:%95s", &p, pname) == 2 && p == pid)
                    return copy_str(name, length, pname);
            }
        }
    }
    /* the ledger's processes, in this namespace (under container=1 NVML lists host PIDs) */
    if (!cfg.container) {
        char pname[96];
        if (ledger_name(pid, pname, sizeof pname)) return copy_str(name, length, pname);
    }
    /* the configured (unscripted) processes of list_processes: this namespace's own */
    if (!cfg.container && pid >= 4242u && pid < 4242u + 100u * (MAX_MIG + 1))
        return copy_str(name, length, "cuda-app");
    /* nvml.h: "NVML_ERROR_NOT_FOUND if process doesn't exists" (container=1: a host PID is
     * not in this namespace's /proc) */
    return NVML_ERROR_NOT_FOUND;
}

/* Events: one set; Xid critical errors from the script, delivered once each. */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER("nvmlEventSetCreate");
    *set = (nvmlEventSet_t)(uintptr_t)1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t dev, unsigned long long *types) {
    ENTER("nvmlDeviceGetSupportedEventTypes");
    {
        DEVICE(g, dev);
        *types = g->event_types ? g->event_types
                                : (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |
                                   nvmlEventTypeXidCriticalError);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types,
                                      nvmlEventSet_t set) {
    ENTER("nvmlDeviceRegisterEvents");
    (void)set;
    {
        unsigned long long supported;
        DEVICE(g, dev);
        supported = g->event_types ? g->event_types
                                   : (nvmlEventTypeSingleBitEccError |
                                      nvmlEventTypeDoubleBitEccError |
                                      nvmlEventTypeXidCriticalError);
        /* nvml.h: "NVML_ERROR_NOT_SUPPORTED if the platform does not support this feature
         * or some of requested event types" */
        if (types & ~supported) return NVML_ERROR_NOT_SUPPORTED;
        g->registered |= types;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeout_ms) {
    int r;
    ENTER("nvmlEventSetWait_v2");
    (void)set;
    script_load();
    for (r = 0; r < scr.rows; r++) {
        unsigned int gi = 0xFFFFFFFFu;
        int other = !strcmp(scr.key[r], "event");
        unsigned long long type = other ? strtoull(scr.value[r], NULL, 0)
                                        : nvmlEventTypeXidCriticalError;
        if (scr.delivered[r] || (long long)scr.step[r] > scr.now) continue;
        if (!other && strcmp(scr.key[r], "xid") && sscanf(scr.key[r], "mig.%u.xid", &gi) != 1)
            continue;
        /* gpu.N.event=<nvmlEventType bit>: an event of another type, delivered only when the
         * set registered it ("eventData is 0 for any other event") */
        if (other && (scr.gpu[r] >= cfg.gpu_count || !(cfg.gpus[scr.gpu[r]].registered & type)))
            continue;
        scr.delivered[r] = 1;
        data->device = (nvmlDevice_t)(uintptr_t)(scr.gpu[r] + 1);
        data->eventType = type;
        data->eventData = other ? 0 : strtoull(scr.value[r], NULL, 10);
        /* nvml.h: "If MIG is enabled and nvmlEventTypeXidCriticalError event is attributable
         * to a GPU instance, stores a valid GPU instance ID. gpuInstanceId is set to
         * 0xFFFFFFFF otherwise." */
        data->gpuInstanceId = gi;
        data->computeInstanceId = gi == 0xFFFFFFFFu ? 0xFFFFFFFFu : 0u;
        return NVML_SUCCESS;
    }
    if (timeout_ms) {
        struct timespec ts;
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
        nanosleep(&ts, NULL); /* a signal ends the wait early, as in the real library */
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) {
    return nvmlEventSetWait_v2(set, data, ms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    ENTER("nvmlEventSetFree");
    (void)set;
    return NVML_SUCCESS;
}

/* ---- issue 28: the driver's own counters --------------------------------------------- */

#define STEP_US 1000000ULL                    /* one step is one second of driver time */
#define BASE_US (1790000000ULL * STEP_US)     /* the driver's clock at step 0 */

/* nvml.h (nvmlDeviceGetSamples): "lastSeenTimeStamp represents CPU timestamp in
 * microseconds. Set it to 0 to fetch all the samples maintained by the underlying buffer." ...
 * "To get the size of samples that user needs to allocate, the method is invoked with
 * samples set to NULL." ... "@note On MIG-enabled GPUs, querying the following sample types,
 * NVML_GPU_UTILIZATION_SAMPLES, ... is not currently supported." ... "NVML_ERROR_NOT_FOUND if
 * sample entries are not found". NVML_GPU_UTILIZATION_SAMPLES: "percent of time during which
 * one or more kernels was executing on the GPU". The buffer holds util_samples entries per
 * step for the last 10 steps; the entries of step s lie in (s-1, s] seconds and carry the
 * step's buf_util (default: util), so the buffer read at step s covers the second before. */
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t dev, nvmlSamplingType_t type,
                                  unsigned long long last, nvmlValueType_t *vtype,
                                  unsigned int *count, nvmlSample_t *samples) {
    long long s, first;
    unsigned int j, n = 0;
    ENTER("nvmlDeviceGetSamples");
    {
        SCRIPTED(g, dev);
        if (!count) return NVML_ERROR_INVALID_ARGUMENT;
        if (type != NVML_GPU_UTILIZATION_SAMPLES || !g->util_samples || g->mig || mig_ >= 0)
            return NVML_ERROR_NOT_SUPPORTED;
        if (samples && *count == 0) return NVML_ERROR_INVALID_ARGUMENT;
        first = scr.now > 9 ? scr.now - 9 : 0;
        for (s = first; s <= scr.now; s++) {
            const char *v = script_get_at(gpu_number(g), "buf_util", s);
            unsigned int value;
            if (!v) v = script_get_at(gpu_number(g), "util", s);
            value = v ? (unsigned)strtoull(v, NULL, 0) : 0u;
            for (j = 1; j <= g->util_samples; j++) {
                unsigned long long ts = BASE_US + (unsigned long long)s * STEP_US - STEP_US +
                                        j * STEP_US / g->util_samples;
                if (ts <= last) continue;
                if (samples && n < *count) {
                    samples[n].timeStamp = ts;
                    samples[n].sampleValue.uiVal = value;
                }
                n++;
            }
        }
        if (vtype) *vtype = NVML_VALUE_TYPE_UNSIGNED_INT;
        if (n == 0) return NVML_ERROR_NOT_FOUND;
        if (samples && n > *count) n = *count;
        *count = n;
    }
    return NVML_SUCCESS;
}

/* nvml.h: "Retrieves total energy consumption for this GPU in millijoules (mJ) since the
 * driver was last reloaded" ... "For Volta or newer fully supported devices." ...
 * "NVML_ERROR_NOT_SUPPORTED if the device does not support energy readings". The counter
 * adds each step's scripted power over that step's second (mW x 1 s = mJ), from an offset:
 * the driver loaded long before the job. */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t dev, unsigned long long *energy) {
    long long s;
    unsigned long long mj = 5000000000ULL;
    ENTER("nvmlDeviceGetTotalEnergyConsumption");
    {
        SCRIPTED(g, dev);
        if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
        if (!g->energy_counter || mig_ >= 0) return NVML_ERROR_NOT_SUPPORTED;
        for (s = 1; s <= scr.now; s++) {
            const char *v = script_get_at(gpu_number(g), "power_mw", s);
            mj += v ? strtoull(v, NULL, 0) : 70000ULL;
        }
        *energy = mj;
    }
    return NVML_SUCCESS;
}

/* nvml.h (nvmlDeviceGetGpuInstanceId): "Get GPU instance ID for the given MIG device
 * handle." ... "NVML_ERROR_INVALID_ARGUMENT if device or id reference is invalid". Slot M's
 * instance is M here. */
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned int *id) {
    ENTER("nvmlDeviceGetGpuInstanceId");
    {
        DEVICE(g, dev);
        (void)g;
        if (mig_ < 0 || !id) return NVML_ERROR_INVALID_ARGUMENT;
        *id = (unsigned)mig_;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned int *id) {
    ENTER("nvmlDeviceGetComputeInstanceId");
    {
        DEVICE(g, dev);
        (void)g;
        if (mig_ < 0 || !id) return NVML_ERROR_INVALID_ARGUMENT;
        *id = 0;
    }
    return NVML_SUCCESS;
}

/* ---- GPM ---------------------------------------------------------------------------------
 * nvml.h: "For Hopper or newer fully supported devices." (every nvmlGpm* call). A sample is
 * the step and GPU instance it was taken at; nvmlGpmMetricsGet answers
 * NVML_GPM_METRIC_GRAPHICS_UTIL ("Percentage of time any compute/graphics app was active on
 * the GPU. 0.0 - 100.0") over the steps between the two samples: the script's
 * gpu.N.mig.M.util (a GPU instance) or gpu.N.util (the whole GPU) at the later sample; and
 * SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL, DRAM_BW_UTIL (all "0.0 - 100.0") from the keys
 * sm, occupancy, tensor, dram (per GPU or mig.M.). Other metrics: NOT_SUPPORTED. */
struct nvmlGpmSample_st {
    int gpu;
    int gi; /* -1: the whole GPU */
    long long step;
};

static int gpm_supported(gpu_t *g) { return g->cc_major >= 9; }

/* nvml.h: "Allocate a sample buffer to be used with NVML GPM" ... "NVML_ERROR_INVALID_ARGUMENT
 * if an invalid pointer is provided" */
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    ENTER("nvmlGpmSampleAlloc");
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof(struct nvmlGpmSample_st));
    return *sample ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    ENTER("nvmlGpmSampleFree");
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}

/* nvml.h: "Indicate whether the supplied device supports GPM" ... "This API supports the
 * device handle and MIG device handle." */
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t dev, nvmlGpmSupport_t *support) {
    ENTER("nvmlGpmQueryDeviceSupport");
    {
        DEVICE(g, dev);
        if (!support) return NVML_ERROR_INVALID_ARGUMENT;
        if (support->version != NVML_GPM_SUPPORT_VERSION)
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        support->isSupportedDevice = (unsigned)gpm_supported(g);
    }
    return NVML_SUCCESS;
}

/* nvml.h: "The device handle or MIG device handle to get samples for" */
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t dev, nvmlGpmSample_t sample) {
    ENTER("nvmlGpmSampleGet");
    {
        SCRIPTED(g, dev);
        if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
        if (!gpm_supported(g)) return NVML_ERROR_NOT_SUPPORTED;
        sample->gpu = gpu_number(g);
        sample->gi = mig_;
        sample->step = scr.now;
    }
    return NVML_SUCCESS;
}

/* nvml.h: "Read a sample of GPM metrics into the provided gpmSample buffer for a MIG GPU
 * Instance." (device: the parent GPU, gpuInstanceId: the instance) */
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t dev, unsigned int gi, nvmlGpmSample_t sample) {
    ENTER("nvmlGpmMigSampleGet");
    {
        SCRIPTED(g, dev);
        if (!sample || mig_ >= 0 || !g->mig || (int)gi >= g->mig_count)
            return NVML_ERROR_INVALID_ARGUMENT;
        if (!gpm_supported(g)) return NVML_ERROR_NOT_SUPPORTED;
        sample->gpu = gpu_number(g);
        sample->gi = (int)gi;
        sample->step = scr.now;
    }
    return NVML_SUCCESS;
}

/* nvml.h: "The version should be set to NVML_GPM_METRICS_GET_VERSION" ... "nvmlReturn: Status
 * of this metric. If this is nonzero, then value is not valid" */
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    unsigned int k;
    ENTER("nvmlGpmMetricsGet");
    if (!get || !get->sample1 || !get->sample2 || get->numMetrics > NVML_GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (get->sample1->gpu != get->sample2->gpu || get->sample1->gi != get->sample2->gi ||
        get->sample2->step <= get->sample1->step)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (k = 0; k < get->numMetrics; k++) {
        nvmlGpmMetric_t *m = &get->metrics[k];
        char key[32];
        const char *v;
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        const char *name;
        switch (m->metricId) {
        case NVML_GPM_METRIC_GRAPHICS_UTIL: name = "util"; break;
        case NVML_GPM_METRIC_SM_UTIL: name = "sm"; break;
        case NVML_GPM_METRIC_SM_OCCUPANCY: name = "occupancy"; break;
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL: name = "tensor"; break;
        case NVML_GPM_METRIC_DRAM_BW_UTIL: name = "dram"; break;
        default: name = NULL;
        }
        if (!name) {
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        v = script_get_at(get->sample2->gpu,
                          script_key(key, sizeof key, get->sample2->gi, name),
                          get->sample2->step);
        m->value = v ? strtod(v, NULL) : 0.0;
        m->nvmlReturn = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}

/* ---- violation counters -------------------------------------------------------------------
 * nvml.h (nvmlViolationTime_t): "referenceTime represents CPU timestamp in microseconds",
 * "violationTime in Nanoseconds"; (nvmlPerfPolicyType_t) "NVML_PERF_POLICY_POWER: How long
 * did power violations cause the GPU to be below application clocks", ... and the
 * deprecation note's translations "NVML_PERF_POLICY_POWER -> ..._SW_POWER_CAP",
 * "NVML_PERF_POLICY_THERMAL -> ..._SW_THERM_SLOWDOWN". The counter adds one second for each
 * step whose throttle bits name the policy (power: 0x4, thermal: 0x20 | 0x40, board limit:
 * 0x200 ... total: any slowdown bit), plus the step's gpu.N.viol_<policy>_ms. */
nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t dev, nvmlPerfPolicyType_t policy,
                                          nvmlViolationTime_t *viol) {
    unsigned long long bits, ns = 0;
    const char *extra_key = NULL;
    long long s;
    ENTER("nvmlDeviceGetViolationStatus");
    {
        SCRIPTED(g, dev);
        if (!viol) return NVML_ERROR_INVALID_ARGUMENT;
        if (!g->violation || mig_ >= 0) return NVML_ERROR_NOT_SUPPORTED;
        switch (policy) {
        case NVML_PERF_POLICY_POWER: bits = 0x4; extra_key = "viol_power_ms"; break;
        case NVML_PERF_POLICY_THERMAL: bits = 0x20 | 0x40; extra_key = "viol_thermal_ms"; break;
        case NVML_PERF_POLICY_BOARD_LIMIT: bits = 0x200; break;
        case NVML_PERF_POLICY_RELIABILITY: bits = 0x400; break;
        case NVML_PERF_POLICY_TOTAL_APP_CLOCKS:
            bits = 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400;
            break;
        default: return NVML_ERROR_NOT_SUPPORTED;
        }
        for (s = 1; s <= scr.now; s++) {
            const char *v = script_get_at(gpu_number(g), "throttle", s);
            const char *p = extra_key ? script_get_at(gpu_number(g), extra_key, s) : NULL;
            unsigned long long extra = 0;
            if (v && (strtoull(v, NULL, 0) & bits)) ns += 1000000000ULL;
            if (p) extra = strtoull(p, NULL, 0);
            if (policy == NVML_PERF_POLICY_TOTAL_APP_CLOCKS) {
                const char *a = script_get_at(gpu_number(g), "viol_power_ms", s);
                const char *b = script_get_at(gpu_number(g), "viol_thermal_ms", s);
                extra = (a ? strtoull(a, NULL, 0) : 0) + (b ? strtoull(b, NULL, 0) : 0);
            }
            ns += extra * 1000000ULL;
        }
        viol->referenceTime = BASE_US + (unsigned long long)(scr.now > 0 ? scr.now : 0) * STEP_US;
        viol->violationTime = ns;
    }
    return NVML_SUCCESS;
}

/* ---- field values ---------------------------------------------------------------------------
 * nvml.h (nvmlDeviceGetFieldValues): "NVML_SUCCESS if any values in values were populated.
 * Note that you must check the nvmlReturn field of each value for each individual status";
 * (nvmlFieldValue_t) "value is undefined if nvmlReturn != NVML_SUCCESS". Answered:
 * NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES ("PCIe transmit bytes. Value can be wrapped.")
 * where gpu.N.pcie_counters=1, the sum of the script's gpu.N.pcie_tx_mib / pcie_rx_mib over
 * the steps so far (MiB a step moves); NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX ("in
 * KiB"; "A scopeId of UINT_MAX returns aggregate value summed up across all links") where
 * gpu.N.nvlink=1, from nvlink_tx_mib / nvlink_rx_mib; NVML_FI_DEV_GET_GPU_RECOVERY_ACTION from the
 * script's gpu.N.recovery_action (the board's: a MIG device handle gets NOT_SUPPORTED too).
 * Anything else: NOT_SUPPORTED. */
static unsigned long long script_sum(gpu_t *g, const char *key, unsigned long long unit) {
    long long s;
    unsigned long long total = 0;
    for (s = 1; s <= scr.now; s++) {
        const char *v = script_get_at(gpu_number(g), key, s);
        if (v) total += strtoull(v, NULL, 0) * unit;
    }
    return total;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t dev, int count, nvmlFieldValue_t *values) {
    int k;
    ENTER("nvmlDeviceGetFieldValues");
    {
        SCRIPTED(g, dev);
        if (!values || count < 0) return NVML_ERROR_INVALID_ARGUMENT;
        for (k = 0; k < count; k++) {
            nvmlFieldValue_t *v = &values[k];
            const char *key = NULL;
            unsigned long long unit = 1024ULL * 1024ULL;
            int ok = 0;
            switch (v->fieldId) {
            case NVML_FI_DEV_PCIE_COUNT_TX_BYTES: key = "pcie_tx_mib"; ok = g->pcie_counters; break;
            case NVML_FI_DEV_PCIE_COUNT_RX_BYTES: key = "pcie_rx_mib"; ok = g->pcie_counters; break;
            case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
                key = "nvlink_tx_mib"; unit = 1024ULL; ok = g->nvlink && v->scopeId == 0xFFFFFFFFu;
                break;
            case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
                key = "nvlink_rx_mib"; unit = 1024ULL; ok = g->nvlink && v->scopeId == 0xFFFFFFFFu;
                break;
            case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
                /* "GPU Recovery action. See \ref nvmlDeviceGpuRecoveryAction_t": the script's
                 * gpu.N.recovery_action (a driver without it: NOT_SUPPORTED) */
                key = "recovery_action"; ok = script_get(gpu_number(g), key) != NULL; break;
            default: break;
            }
            v->timestamp = (long long)(BASE_US + (unsigned long long)(scr.now > 0 ? scr.now : 0) * STEP_US);
            v->latencyUsec = 0;
            /* nvmlDeviceGetFieldValues takes "The device handle of the GPU"; the PCIe and
             * NVLink counters are the board's (a MIG device handle: NOT_SUPPORTED per value,
             * the parent handle answers for the whole board) */
            if (!ok || mig_ >= 0) {
                v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                continue;
            }
            if (v->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
                v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                v->value.uiVal = (unsigned)strtoul(script_get(gpu_number(g), key), NULL, 0);
                v->nvmlReturn = NVML_SUCCESS;
                continue;
            }
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = script_sum(g, key, unit);
            v->nvmlReturn = NVML_SUCCESS;
        }
    }
    return NVML_SUCCESS;
}

/* ---- ledger (the pytest plugin) --------------------------------------------------------
 * FAKE_NVML_LEDGER names a directory that stands for the driver's record of which process
 * holds how much device memory on which GPU, shared by every process of the machine, the way
 * the real driver's is: a file `<gpu index>.<pid>` holding `<MiB> <name>` says process <pid>
 * holds <MiB> on GPU <index> (a test allocates by writing it, frees by removing it). Each call
 * reads it afresh. Whole GPUs only (MIG device handles list no ledger entry). Its processes
 * come after the configured and scripted ones in nvmlDeviceGetComputeRunningProcesses*,
 * with the host's PIDs under container=1; their memory adds to nvmlMemory_t.used (unless the
 * script sets gpu.N.mem_used_mib); nvmlSystemGetProcessName names them. */
#include <dirent.h>

typedef struct {
    unsigned int gpu, pid;
    unsigned long long mib;
    char name[96];
} ledger_entry_t;

/* Calls `fn` for each well-formed ledger entry; stops when it returns nonzero. */
static int ledger_each(int (*fn)(const ledger_entry_t *, void *), void *arg) {
    const char *dir = getenv("FAKE_NVML_LEDGER");
    char path[4096];
    struct dirent *de;
    DIR *d;
    int stop = 0;
    if (!dir || !*dir || !(d = opendir(dir))) return 0;
    while (!stop && (de = readdir(d))) {
        ledger_entry_t e;
        FILE *f;
        char extra;
        memset(&e, 0, sizeof e);
        if (sscanf(de->d_name, "%u.%u%c", &e.gpu, &e.pid, &extra) != 2) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (!(f = fopen(path, "r"))) continue; /* freed between readdir and open */
        if (fscanf(f, "%llu %95s", &e.mib, e.name) >= 1) stop = fn(&e, arg);
        fclose(f);
    }
    closedir(d);
    return stop;
}

typedef struct {
    gpu_t *g;
    proc_t *out;
    unsigned int cap, n;
    unsigned long long bytes;
} ledger_query_t;

static int ledger_add(const ledger_entry_t *e, void *arg) {
    ledger_query_t *q = (ledger_query_t *)arg;
    if ((int)e->gpu != gpu_number(q->g)) return 0;
    q->bytes += e->mib * 1048576ULL;
    if (q->out && q->n < q->cap) {
        q->out[q->n].pid = cfg.container ? HOST_PID_BASE + e->pid : e->pid;
        q->out[q->n].used = e->mib * 1048576ULL;
    }
    q->n++;
    return 0;
}

static unsigned int ledger_processes(gpu_t *g, int mig, proc_t *out, unsigned int cap,
                                     unsigned int n) {
    ledger_query_t q;
    if (mig >= 0) return n;
    q.g = g;
    q.out = out;
    q.cap = cap;
    q.n = n;
    q.bytes = 0;
    ledger_each(ledger_add, &q);
    return q.n;
}

static unsigned long long ledger_bytes(gpu_t *g, int mig) {
    ledger_query_t q;
    if (mig >= 0) return 0;
    memset(&q, 0, sizeof q);
    q.g = g;
    ledger_each(ledger_add, &q);
    return q.bytes;
}

typedef struct {
    unsigned int pid;
    char *name;
    size_t length;
} ledger_name_t;

static int ledger_match(const ledger_entry_t *e, void *arg) {
    ledger_name_t *q = (ledger_name_t *)arg;
    if (e->pid != q->pid) return 0;
    snprintf(q->name, q->length, "%s", e->name[0] ? e->name : "python");
    return 1;
}

static int ledger_name(unsigned int pid, char *name, size_t length) {
    ledger_name_t q;
    q.pid = pid;
    q.name = name;
    q.length = length;
    return ledger_each(ledger_match, &q);
}
