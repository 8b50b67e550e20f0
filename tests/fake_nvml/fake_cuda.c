/*
 * A fake libcuda.so.1 for tests: verify-cuda-env only asks the dynamic loader whether (and
 * from where) the CUDA driver library loads; it never calls into it. The one entry point
 * keeps the file a real shared library with a real CUDA driver API symbol.
 */
int cuDriverGetVersion(int *version) {
    if (!version) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *version = 13000;
    return 0;
}
