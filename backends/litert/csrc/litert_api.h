/* The part of LiteRT's C API that lite_run.c calls, declared here because the ai-edge-litert wheel ships
 * libLiteRt.so with no headers.
 *
 * Written for multiexport from the documented declarations of google-ai-edge/LiteRT's `litert/c/` headers
 * (each group below names its header), and checked against the wheel this project locks,
 * ai-edge-litert 2.3.0 (ai_edge_litert/libLiteRt.so, symbols versioned VERS_1.0): every function here is in
 * `nm -D --defined-only libLiteRt.so`, and the argument order of the ones whose signature changed across
 * LiteRT releases was read from the library's own code (LiteRtCreateModelFromFile takes the environment
 * first; LiteRtCreateManagedTensorBuffer takes it first too; LiteRtCreateTensorBufferFromHostMemory does
 * not). Only what the program calls is declared; nothing here is copied from LiteRT's sources.
 *
 * The classic TFLite interpreter C API (TfLiteInterpreterCreate, ...) is not exported by any library of
 * that wheel (its interpreter is linked into the Python extension with hidden symbols), so the consumer
 * uses LiteRT's CompiledModel API, whose CPU accelerator runs the model through the XNNPACK delegate.
 */
#ifndef MX_LITERT_API_H
#define MX_LITERT_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* litert/c/litert_common.h: opaque handles (LITERT_DEFINE_HANDLE), status codes, index and accelerator types. */
typedef struct LiteRtEnvironmentT *LiteRtEnvironment;
typedef struct LiteRtModelT *LiteRtModel;
typedef struct LiteRtSignatureT *LiteRtSignature;
typedef struct LiteRtTensorT *LiteRtTensor;
typedef struct LiteRtOptionsT *LiteRtOptions;
typedef struct LiteRtOpaqueOptionsT *LiteRtOpaqueOptions;
typedef struct LiteRtCompiledModelT *LiteRtCompiledModel;
typedef struct LiteRtTensorBufferT *LiteRtTensorBuffer;

typedef int LiteRtStatus; /* an enum there; kLiteRtStatusOk is 0, the others are named by litert_status_name */
#define kLiteRtStatusOk 0
typedef size_t LiteRtParamIndex;
typedef int LiteRtHwAcceleratorSet; /* a bit field of LiteRtHwAccelerators */
#define kLiteRtHwAcceleratorCpu 1   /* 1 << 0 */

/* litert/c/litert_layout.h and litert/c/litert_model_types.h: documented as ABI-stable, with upstream's
 * static_asserts sizeof(LiteRtRankedTensorType) == 72 and offsetof(..., layout) == 4 (GCC/Clang), which the
 * asserts below repeat. */
#define LITERT_TENSOR_MAX_RANK 8
typedef struct {
  unsigned int rank : 7;
  bool has_strides : 1;
  int32_t dimensions[LITERT_TENSOR_MAX_RANK];
  uint32_t strides[LITERT_TENSOR_MAX_RANK];
} LiteRtLayout;

typedef enum {
  kLiteRtElementTypeNone = 0,
  kLiteRtElementTypeFloat32 = 1,
  kLiteRtElementTypeInt32 = 2,
  kLiteRtElementTypeUInt8 = 3,
  kLiteRtElementTypeInt64 = 4,
  kLiteRtElementTypeBool = 6,
  kLiteRtElementTypeInt16 = 7,
  kLiteRtElementTypeInt8 = 9,
  kLiteRtElementTypeFloat16 = 10,
  kLiteRtElementTypeFloat64 = 11,
  kLiteRtElementTypeUInt64 = 13,
  kLiteRtElementTypeUInt32 = 16,
  kLiteRtElementTypeUInt16 = 17,
  kLiteRtElementTypeBFloat16 = 19,
} LiteRtElementType;

typedef struct {
  LiteRtElementType element_type;
  LiteRtLayout layout;
} LiteRtRankedTensorType;

_Static_assert(sizeof(LiteRtLayout) == 68, "LiteRtLayout: 68 bytes in litert_layout.h");
_Static_assert(sizeof(LiteRtRankedTensorType) == 72, "LiteRtRankedTensorType: 72 bytes in litert_model_types.h");
_Static_assert(offsetof(LiteRtRankedTensorType, layout) == 4, "LiteRtRankedTensorType.layout at offset 4");

/* litert/c/litert_tensor_buffer_types.h and litert_common.h (lock mode); litert/c/litert_tensor_buffer.h
 * requires host memory handed to LiteRtCreateTensorBufferFromHostMemory to be aligned to
 * LITERT_HOST_MEMORY_BUFFER_ALIGNMENT, 64. */
typedef enum { kLiteRtTensorBufferTypeHostMemory = 1 } LiteRtTensorBufferType;
typedef enum { kLiteRtTensorBufferLockModeRead = 0, kLiteRtTensorBufferLockModeWrite = 1 } LiteRtTensorBufferLockMode;
typedef void (*LiteRtHostMemoryDeallocator)(void *addr);
#define LITERT_HOST_MEMORY_BUFFER_ALIGNMENT 64

/* litert/c/litert_environment.h (LiteRtEnvOption is passed as NULL with 0 options: left incomplete). */
typedef struct LiteRtEnvOption LiteRtEnvOption;
LiteRtStatus LiteRtCreateEnvironment(int num_options, const LiteRtEnvOption *options, LiteRtEnvironment *environment);
void LiteRtDestroyEnvironment(LiteRtEnvironment environment);

/* litert/c/litert_model.h */
LiteRtStatus LiteRtCreateModelFromFile(LiteRtEnvironment environment, const char *filename, LiteRtModel *model);
void LiteRtDestroyModel(LiteRtModel model);
LiteRtStatus LiteRtGetNumModelSignatures(LiteRtModel model, LiteRtParamIndex *num_signatures);
LiteRtStatus LiteRtGetModelSignature(LiteRtModel model, LiteRtParamIndex signature_index, LiteRtSignature *signature);
LiteRtStatus LiteRtGetSignatureKey(LiteRtSignature signature, const char **signature_key);
LiteRtStatus LiteRtGetNumSignatureInputs(LiteRtSignature signature, LiteRtParamIndex *num_inputs);
LiteRtStatus LiteRtGetSignatureInputName(LiteRtSignature signature, LiteRtParamIndex input_idx,
                                         const char **input_name);
LiteRtStatus LiteRtGetSignatureInputTensorByIndex(LiteRtSignature signature, LiteRtParamIndex input_idx,
                                                  LiteRtTensor *tensor);
LiteRtStatus LiteRtGetNumSignatureOutputs(LiteRtSignature signature, LiteRtParamIndex *num_outputs);
LiteRtStatus LiteRtGetSignatureOutputName(LiteRtSignature signature, LiteRtParamIndex output_idx,
                                          const char **output_name);
LiteRtStatus LiteRtGetSignatureOutputTensorByIndex(LiteRtSignature signature, LiteRtParamIndex output_idx,
                                                   LiteRtTensor *tensor);
LiteRtStatus LiteRtGetRankedTensorType(LiteRtTensor tensor, LiteRtRankedTensorType *ranked_tensor_type);
LiteRtStatus LiteRtGetTensorIndex(LiteRtTensor tensor, uint32_t *tensor_index);

/* litert/c/litert_options.h (compilation options) and litert/c/litert_opaque_options.h */
LiteRtStatus LiteRtCreateOptions(LiteRtOptions *options);
void LiteRtDestroyOptions(LiteRtOptions options);
LiteRtStatus LiteRtSetOptionsHardwareAccelerators(LiteRtOptions options, LiteRtHwAcceleratorSet hardware_accelerators);
LiteRtStatus LiteRtAddOpaqueOptions(LiteRtOptions options, LiteRtOpaqueOptions opaque_options);
LiteRtStatus LiteRtCreateOpaqueOptions(const char *payload_identifier, void *payload_data,
                                       void (*payload_destructor)(void *payload_data), LiteRtOpaqueOptions *options);

/* litert/c/litert_compiled_model.h */
LiteRtStatus LiteRtCreateCompiledModel(LiteRtEnvironment environment, LiteRtModel model,
                                       LiteRtOptions compilation_options, LiteRtCompiledModel *compiled_model);
void LiteRtDestroyCompiledModel(LiteRtCompiledModel compiled_model);
LiteRtStatus LiteRtCompiledModelResizeInputTensor(LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index,
                                                  LiteRtParamIndex input_index, const int *dims, size_t dims_size);
LiteRtStatus LiteRtGetCompiledModelOutputTensorLayouts(LiteRtCompiledModel compiled_model,
                                                       LiteRtParamIndex signature_index, size_t num_layouts,
                                                       LiteRtLayout *layouts, bool update_allocation);
LiteRtStatus LiteRtRunCompiledModel(LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index,
                                    size_t num_input_buffers, LiteRtTensorBuffer *input_buffers,
                                    size_t num_output_buffers, LiteRtTensorBuffer *output_buffers);

/* litert/c/litert_tensor_buffer.h */
LiteRtStatus LiteRtCreateTensorBufferFromHostMemory(const LiteRtRankedTensorType *tensor_type, void *host_buffer_addr,
                                                    size_t host_buffer_size, LiteRtHostMemoryDeallocator deallocator,
                                                    LiteRtTensorBuffer *buffer);
LiteRtStatus LiteRtCreateManagedTensorBuffer(LiteRtEnvironment env, LiteRtTensorBufferType buffer_type,
                                             const LiteRtRankedTensorType *tensor_type, size_t buffer_size,
                                             LiteRtTensorBuffer *buffer);
LiteRtStatus LiteRtGetTensorBufferPackedSize(LiteRtTensorBuffer tensor_buffer, size_t *size);
LiteRtStatus LiteRtLockTensorBuffer(LiteRtTensorBuffer tensor_buffer, void **host_mem_addr,
                                    LiteRtTensorBufferLockMode lock_mode);
LiteRtStatus LiteRtUnlockTensorBuffer(LiteRtTensorBuffer buffer);
void LiteRtDestroyTensorBuffer(LiteRtTensorBuffer buffer);

#ifdef __cplusplus
}
#endif
#endif
