/*
 * A fake libcuda.so.1 for tests. verify-cuda-env asks the dynamic loader whether (and from
 * where) the CUDA driver library loads; the fake NVML's nvmlSystemGetCudaDriverVersion_v2
 * dlopens it and calls cuDriverGetVersion, as the real NVML does (nvml.h: "The returned CUDA
 * driver version by calling cuDriverGetVersion()").
 *
 * This library holds the CUDA version of the machine, as the real libcuda does:
 *   - a driver's own libcuda answers the driver's CUDA version, `cuda_driver_version=` of
 *     the fake NVML's config (FAKE_NVML_CONFIG): one machine, one config, one number;
 *   - a forward-compatibility libcuda (cuda-compat, built with -DFAKE_CUDA_VERSION=13020)
 *     answers its own CUDA version, whatever the installed driver's is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int configured_version(void) {
#ifdef FAKE_CUDA_VERSION
    return FAKE_CUDA_VERSION;
#else
    char line[512];
    int version = 13000; /* the fake NVML's default driver (580) */
    const char *path = getenv("FAKE_NVML_CONFIG");
    FILE *f;
    if (!path || !(f = fopen(path, "r"))) return version;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "cuda_driver_version=", 20)) version = atoi(line + 20);
    fclose(f);
    return version;
#endif
}

int cuDriverGetVersion(int *version) {
    if (!version) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *version = configured_version();
    return 0;
}
