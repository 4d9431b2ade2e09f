/* The driver floor of benchmarks/launch_overhead.py: cuLaunchKernel called in a C loop.
 *
 * Built on the GPU machine by the benchmark itself (gcc -O2 -shared -fPIC) and loaded with
 * ctypes; the function pointer is the driver's own cuLaunchKernel (cuGetProcAddress), so no
 * CUDA header is needed. Each call of launch_loop makes `count` launches with the same
 * pre-packed parameters and returns the first error (0: CUDA_SUCCESS).
 */

typedef int (*launch_kernel_t)(void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared_mem, void *stream, void **params,
                               void **extra);

int launch_loop(void *launch_kernel, void *function, unsigned int grid_x,
                unsigned int block_x, void *stream, void **params, int count)
{
    launch_kernel_t launch = (launch_kernel_t)launch_kernel;
    for (int i = 0; i < count; i++) {
        int err = launch(function, grid_x, 1, 1, block_x, 1, 1, 0, stream, params, 0);
        if (err)
            return err;
    }
    return 0;
}
