"""verify-cuda-env: will CUDA code run on this runner?"""
