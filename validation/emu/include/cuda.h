/* cuda.h for the CUDA emulation build: the driver API's types the backend names. */
#ifndef TR_EMU_CUDA_H
#define TR_EMU_CUDA_H
typedef int CUdevice;
typedef enum cudaError_enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 } CUresult;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
#endif
