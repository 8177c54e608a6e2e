// What the kernel harnesses here share: CK(call) exits with the file, line,
// call and CUDA's message when a runtime call fails.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                                    \
    do {                                                                                                         \
        cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                  \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)
