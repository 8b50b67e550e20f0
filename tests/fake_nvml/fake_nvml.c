/*
 * A fake libnvidia-ml.so.1 for tests: the real nvidia-ml-py loads it through ctypes
 * (dlopen honours LD_LIBRARY_PATH), so the code path of a GPU runner runs without a GPU.
 *
 * Configuration: FAKE_NVML_CONFIG names a file of `key=value` lines, e.g.
 *   driver_version=580.159.04
 *   cuda_driver_version=13000
 *   gpu.count=1
 *   gpu.0.name=NVIDIA H200
 *   gpu.0.uuid=GPU-...
 *   gpu.0.cc=9.0
 *   gpu.0.memory_mib=143771
 *   gpu.0.brand=2            (nvmlBrandType_t)
 *   gpu.0.mig=1              gpu.0.mig.count=2   gpu.0.mig.0.uuid=MIG-...
 *   gpu.0.mig.0.name=...     gpu.0.mig.0.memory_mib=9984   (the MIG device's own readings)
 *   gpu.0.persistence=1      gpu.0.ecc_uncorrected=0   gpu.0.retired_pending=0
 *   gpu.0.remap_pending=0    gpu.0.remap_failure=0     gpu.0.processes=0
 *   fail.<nvml function name>=<nvmlReturn_t>   (that function returns the code)
 * Every call is appended to FAKE_NVML_LOG when set, so tests can assert what ran.
 *
 * Time series (gpu-monitor): FAKE_NVML_SCRIPT names a file of `<step> key=value ...` lines;
 * see the "scripted time series" section at the end of this file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
#define MAX_MIG 8
#define MAX_FAILS 64

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

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
} gpu_t;

static struct {
    int loaded;
    int initialized;
    char driver_version[80];
    int cuda_driver_version;
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
static int enter(const char *name) {
    int k;
    load();
    log_call(name);
    for (k = 0; k < cfg.fails; k++)
        if (!strcmp(cfg.fail_name[k], name)) return cfg.fail_code[k];
    return 0;
}

#define ENTER(name)                 \
    do {                            \
        int rc_ = enter(name);      \
        if (rc_) return rc_;        \
    } while (0)

/* Scripted time series (defined at the end of the file). */
static int fake_script_memory(gpu_t *g, nvmlMemory_t *mem);
static int fake_script_processes(gpu_t *g, unsigned int *count, nvmlProcessInfo_t *infos,
                                 unsigned int *rc);

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

#define DEVICE(var, dev)                            \
    int mig_ = -1;                                  \
    gpu_t *var = gpu_of(dev, &mig_);                \
    (void)mig_;                                     \
    if (!cfg.initialized) return 1;                 \
    if (!var) return 2

static int copy_str(char *dst, unsigned int len, const char *src) {
    if (strlen(src) + 1 > len) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(dst, src);
    return 0;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    ENTER("nvmlInitWithFlags");
    cfg.initialized = 1;
    return 0;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    ENTER("nvmlShutdown");
    cfg.initialized = 0;
    return 0;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 20: return "Insufficient Memory";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER("nvmlSystemGetDriverVersion");
    if (!cfg.initialized) return 1;
    return copy_str(version, length, cfg.driver_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion_v2");
    *v = cfg.cuda_driver_version;
    return 0;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion");
    *v = cfg.cuda_driver_version;
    return 0;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER("nvmlDeviceGetCount_v2");
    if (!cfg.initialized) return 1;
    *count = cfg.gpu_count;
    return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    ENTER("nvmlDeviceGetHandleByIndex_v2");
    if (!cfg.initialized) return 1;
    if (index >= cfg.gpu_count) return 2;
    *dev = (nvmlDevice_t)(uintptr_t)(index + 1);
    return 0;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length) {
    ENTER("nvmlDeviceGetName");
    DEVICE(g, dev);
    if (mig_ >= 0 && g->mig_name[mig_][0]) return copy_str(name, length, g->mig_name[mig_]);
    return copy_str(name, length, g->name);
}

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
    return 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
    ENTER("nvmlDeviceGetMemoryInfo");
    DEVICE(g, dev);
    mem->total = g->memory_mib * 1024ULL * 1024ULL;
    if (mig_ >= 0 && g->mig_memory_mib[mig_]) mem->total = g->mig_memory_mib[mig_] * 1048576ULL;
    mem->used = 0;
    mem->free = mem->total;
    return fake_script_memory(g, mem); /* scripted time series, if any */
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t dev, int *brand) {
    ENTER("nvmlDeviceGetBrand");
    DEVICE(g, dev);
    *brand = g->brand;
    return 0;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current, unsigned int *pending) {
    ENTER("nvmlDeviceGetMigMode");
    DEVICE(g, dev);
    *current = (unsigned)g->mig;
    *pending = (unsigned)g->mig;
    return 0;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count) {
    ENTER("nvmlDeviceGetMaxMigDeviceCount");
    DEVICE(g, dev);
    *count = (unsigned)g->mig_count;
    return 0;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index,
                                                 nvmlDevice_t *mig) {
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
    DEVICE(g, dev);
    if (!g->mig) return 3;
    if ((int)index >= g->mig_count) return 6;
    *mig = (nvmlDevice_t)(uintptr_t)(0x1000 + ((uintptr_t)dev - 1) * 64 + index);
    return 0;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, int *mode) {
    ENTER("nvmlDeviceGetPersistenceMode");
    DEVICE(g, dev);
    *mode = g->persistence;
    return 0;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type,
                                         unsigned long long *count) {
    ENTER("nvmlDeviceGetTotalEccErrors");
    DEVICE(g, dev);
    /* uncorrected (1) volatile (0) only; everything else reads zero */
    *count = (error_type == 1 && counter_type == 0) ? g->ecc_uncorrected : 0;
    return 0;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending) {
    ENTER("nvmlDeviceGetRetiredPagesPendingStatus");
    DEVICE(g, dev);
    *pending = g->retired_pending;
    return 0;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    ENTER("nvmlDeviceGetRemappedRows");
    DEVICE(g, dev);
    *corr = 0;
    *unc = 0;
    *pending = (unsigned)g->remap_pending;
    *failure = (unsigned)g->remap_failure;
    return 0;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    unsigned int k;
    ENTER("nvmlDeviceGetComputeRunningProcesses_v3");
    DEVICE(g, dev);
    if (fake_script_processes(g, count, infos, &k)) return (nvmlReturn_t)k;
    if (g->processes == 0) {
        *count = 0;
        return 0;
    }
    if (!infos || *count < g->processes) {
        *count = g->processes;
        return 7;
    }
    for (k = 0; k < g->processes; k++) {
        infos[k].pid = 4242 + k;
        infos[k].usedGpuMemory = 512ULL * 1024 * 1024;
        infos[k].gpuInstanceId = 0xFFFFFFFF;
        infos[k].computeInstanceId = 0xFFFFFFFF;
    }
    *count = g->processes;
    return 0;
}

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
 */
#include <time.h>

#define MAX_ROWS 4096

static struct {
    int loaded;
    int rows;
    unsigned int step[MAX_ROWS];
    unsigned int gpu[MAX_ROWS];
    char key[MAX_ROWS][16];
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
            char k[16];
            char *eq = strchr(tok, '=');
            if (!eq || sscanf(tok, "gpu.%u.%15[a-z_]", &n, k) != 2) continue;
            scr.step[scr.rows] = step;
            scr.gpu[scr.rows] = n;
            snprintf(scr.key[scr.rows], 16, "%s", k);
            snprintf(scr.value[scr.rows], 160, "%s", eq + 1);
            scr.rows++;
        }
    }
    fclose(f);
}

static int gpu_number(gpu_t *g) { return (int)(g - cfg.gpus); }

/* The latest value of `key` for GPU `n` at the current step, or NULL. */
static const char *script_get(int n, const char *key) {
    const char *found = NULL;
    int r;
    script_load();
    for (r = 0; r < scr.rows; r++)
        if ((long long)scr.step[r] <= scr.now && (int)scr.gpu[r] == n && !strcmp(scr.key[r], key))
            found = scr.value[r];
    return found;
}

static unsigned long long script_num(int n, const char *key, unsigned long long dflt) {
    const char *v = script_get(n, key);
    return v ? strtoull(v, NULL, 0) : dflt;
}

static int script_lost(gpu_t *g) { return script_num(gpu_number(g), "lost", 0) != 0; }

#define SCRIPTED(var, dev)              \
    DEVICE(var, dev);                   \
    script_load();                      \
    if (script_lost(var)) return 15

static int fake_script_memory(gpu_t *g, nvmlMemory_t *mem) {
    const char *v;
    script_load();
    if (script_lost(g)) return 15;
    v = script_get(gpu_number(g), "mem_used_mib");
    if (v) {
        mem->used = strtoull(v, NULL, 10) * 1024ULL * 1024ULL;
        mem->free = mem->total > mem->used ? mem->total - mem->used : 0;
    }
    return 0;
}

/* Fills infos from `procs` when the script sets it (returns 1, *rc = the NVML code). */
static int fake_script_processes(gpu_t *g, unsigned int *count, nvmlProcessInfo_t *infos,
                                 unsigned int *rc) {
    char buf[160], *tok, *save = NULL;
    unsigned int n = 0, cap = *count;
    const char *v;
    script_load();
    if (script_lost(g)) { *rc = 15; return 1; }
    v = script_get(gpu_number(g), "procs");
    if (!v) return 0;
    snprintf(buf, sizeof buf, "%s", v);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned int pid;
        unsigned long long mib;
        if (sscanf(tok, "%u:%llu", &pid, &mib) != 2) continue;
        if (infos && n < cap) {
            infos[n].pid = pid;
            infos[n].usedGpuMemory = mib * 1024ULL * 1024ULL;
            infos[n].gpuInstanceId = 0xFFFFFFFF;
            infos[n].computeInstanceId = 0xFFFFFFFF;
        }
        n++;
    }
    *rc = (n > 0 && (!infos || cap < n)) ? 7 : 0;
    *count = n;
    return 1;
}

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util) {
    if ((uintptr_t)dev == 1) scr.now++; /* GPU 0 opens a sample (even when it fails) */
    ENTER("nvmlDeviceGetUtilizationRates");
    {
        SCRIPTED(g, dev);
        util->gpu = (unsigned)script_num(gpu_number(g), "util", 0);
        util->memory = (unsigned)script_num(gpu_number(g), "mem_util", 0);
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) {
    ENTER("nvmlDeviceGetPowerUsage");
    {
        SCRIPTED(g, dev);
        *mw = (unsigned)script_num(gpu_number(g), "power_mw", 70000);
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int *temp) {
    ENTER("nvmlDeviceGetTemperature");
    (void)sensor;
    {
        SCRIPTED(g, dev);
        *temp = (unsigned)script_num(gpu_number(g), "temp", 35);
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int *mhz) {
    ENTER("nvmlDeviceGetClockInfo");
    (void)type;
    {
        SCRIPTED(g, dev);
        *mhz = (unsigned)script_num(gpu_number(g), "sm_mhz", 1980);
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev,
                                                    unsigned long long *reasons) {
    ENTER("nvmlDeviceGetCurrentClocksEventReasons");
    {
        SCRIPTED(g, dev);
        *reasons = script_num(gpu_number(g), "throttle", 0);
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev,
                                                       unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(dev, reasons);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    unsigned int n;
    ENTER("nvmlSystemGetProcessName");
    script_load();
    for (n = 0; n < cfg.gpu_count; n++) {
        char buf[160], *tok, *save = NULL;
        const char *v = script_get((int)n, "procs");
        if (!v) continue;
        snprintf(buf, sizeof buf, "%s", v);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            unsigned int p;
            char pname[96];
            if (sscanf(tok, "%u:%*u:%95s", &p, pname) == 2 && p == pid)
                return copy_str(name, length, pname);
        }
    }
    return 6; /* NVML_ERROR_NOT_FOUND */
}

/* Events: one set; Xid critical errors from the script, delivered once each. */
typedef void *nvmlEventSet_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER("nvmlEventSetCreate");
    *set = (nvmlEventSet_t)(uintptr_t)1;
    return 0;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t dev, unsigned long long *types) {
    ENTER("nvmlDeviceGetSupportedEventTypes");
    {
        DEVICE(g, dev);
        (void)g;
        *types = 0x1 | 0x2 | 0x8; /* single/double-bit ECC, Xid critical error */
    }
    return 0;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types,
                                      nvmlEventSet_t set) {
    ENTER("nvmlDeviceRegisterEvents");
    (void)types;
    (void)set;
    {
        DEVICE(g, dev);
        (void)g;
    }
    return 0;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeout_ms) {
    int r;
    ENTER("nvmlEventSetWait_v2");
    (void)set;
    script_load();
    for (r = 0; r < scr.rows; r++) {
        if (scr.delivered[r] || (long long)scr.step[r] > scr.now || strcmp(scr.key[r], "xid"))
            continue;
        scr.delivered[r] = 1;
        data->device = (nvmlDevice_t)(uintptr_t)(scr.gpu[r] + 1);
        data->eventType = 0x8;
        data->eventData = strtoull(scr.value[r], NULL, 10);
        data->gpuInstanceId = 0xFFFFFFFF;
        data->computeInstanceId = 0xFFFFFFFF;
        return 0;
    }
    if (timeout_ms) {
        struct timespec ts;
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
        nanosleep(&ts, NULL); /* a signal ends the wait early, as in the real library */
    }
    return 10; /* NVML_ERROR_TIMEOUT */
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) {
    return nvmlEventSetWait_v2(set, data, ms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    ENTER("nvmlEventSetFree");
    (void)set;
    return 0;
}
