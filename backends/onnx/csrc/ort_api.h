/* The part of ONNX Runtime's C API that ort_run.c calls, declared by multiexport (no ONNX Runtime header
 * ships in any package here; its headers are never copied into this project).
 *
 * With MX_ORT_REAL_HEADER defined (the build recipe in backends/onnx/native.py does so when
 * $MULTIEXPORT_ORT_INCLUDE names a directory holding ONNX Runtime's own onnxruntime_c_api.h, e.g. from its
 * release package), that header is used instead and this declaration is not compiled.
 *
 * The documentation is ONNX Runtime's public C API reference (https://onnxruntime.ai/docs/api/c/, the
 * structure OrtApi) and its header include/onnxruntime/core/session/onnxruntime_c_api.h. The library
 * exports one symbol, OrtGetApiBase; everything else is reached through OrtApi, a table of function
 * pointers that ONNX Runtime only ever appends to (its header: "End of Version 1 - DO NOT MODIFY ABOVE",
 * and the same rule for each later version), so a slot's index never changes. The indices below were
 * counted in the header of ORT_API_VERSION 8 (ONNX Runtime 1.8), the version this program asks GetApi
 * for: a runtime of 1.8 or newer serves it, and every function called here has that version's signature.
 * Slots the program does not call are anonymous placeholders; the static assertions at the end pin each
 * called slot to its index. Enum values are the documented ones, written out.
 */
#ifndef MX_ORT_API_H
#define MX_ORT_API_H

#ifdef MX_ORT_REAL_HEADER
#include <onnxruntime_c_api.h>
#define MX_ORT_API_VERSION ORT_API_VERSION
#define MX_ORT_DECLARATION "onnxruntime_c_api.h"
#else

#include <stddef.h>
#include <stdint.h>

#define MX_ORT_API_VERSION 8
#define MX_ORT_DECLARATION "multiexport ort_api.h (ORT_API_VERSION 8)"

typedef struct OrtEnv OrtEnv;
typedef struct OrtStatus OrtStatus;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtIoBinding OrtIoBinding;
typedef struct OrtSession OrtSession;
typedef struct OrtValue OrtValue;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtAllocator OrtAllocator; /* only ever passed by pointer here */

/* ONNX's TensorProto.DataType numbers. */
typedef enum ONNXTensorElementDataType {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64 = 14,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128 = 15,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16
} ONNXTensorElementDataType;

typedef enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE = 0,
  ORT_LOGGING_LEVEL_INFO = 1,
  ORT_LOGGING_LEVEL_WARNING = 2,
  ORT_LOGGING_LEVEL_ERROR = 3,
  ORT_LOGGING_LEVEL_FATAL = 4
} OrtLoggingLevel;

typedef enum GraphOptimizationLevel {
  ORT_DISABLE_ALL = 0,
  ORT_ENABLE_BASIC = 1,
  ORT_ENABLE_EXTENDED = 2,
  ORT_ENABLE_ALL = 99
} GraphOptimizationLevel;

typedef enum ExecutionMode { ORT_SEQUENTIAL = 0, ORT_PARALLEL = 1 } ExecutionMode;

typedef enum OrtAllocatorType { OrtInvalidAllocator = -1, OrtDeviceAllocator = 0, OrtArenaAllocator = 1 } OrtAllocatorType;

typedef enum OrtMemType {
  OrtMemTypeCPUInput = -2,
  OrtMemTypeCPUOutput = -1,
  OrtMemTypeDefault = 0
} OrtMemType;

/* Every status-returning function returns NULL on success, else an OrtStatus to release. */
#define MX_ORT_FN(name, ...) OrtStatus *(*name)(__VA_ARGS__)
/* Slots first..last (inclusive) that this program never calls. */
#define MX_ORT_SKIP(first, last) void (*unused_##first##_##last[(last) - (first) + 1])(void)

typedef struct OrtApi OrtApi;
struct OrtApi {
  MX_ORT_SKIP(0, 1);                                                           /* CreateStatus, GetErrorCode */
  const char *(*GetErrorMessage)(const OrtStatus *status);                     /* 2 */
  MX_ORT_FN(CreateEnv, OrtLoggingLevel level, const char *logid, OrtEnv **out); /* 3 */
  MX_ORT_SKIP(4, 6);
  MX_ORT_FN(CreateSession, const OrtEnv *env, const char *model_path, const OrtSessionOptions *options,
            OrtSession **out);                                                 /* 7 */
  MX_ORT_SKIP(8, 9);                                                           /* CreateSessionFromArray, Run */
  MX_ORT_FN(CreateSessionOptions, OrtSessionOptions **out);                    /* 10 */
  MX_ORT_SKIP(11, 12);
  MX_ORT_FN(SetSessionExecutionMode, OrtSessionOptions *options, ExecutionMode mode); /* 13 */
  MX_ORT_SKIP(14, 22);
  MX_ORT_FN(SetSessionGraphOptimizationLevel, OrtSessionOptions *options, GraphOptimizationLevel level); /* 23 */
  MX_ORT_FN(SetIntraOpNumThreads, OrtSessionOptions *options, int intra_op_num_threads);                  /* 24 */
  MX_ORT_FN(SetInterOpNumThreads, OrtSessionOptions *options, int inter_op_num_threads);                  /* 25 */
  MX_ORT_SKIP(26, 29);
  MX_ORT_FN(SessionGetInputCount, const OrtSession *session, size_t *out);   /* 30 */
  MX_ORT_FN(SessionGetOutputCount, const OrtSession *session, size_t *out);  /* 31 */
  MX_ORT_SKIP(32, 35);
  MX_ORT_FN(SessionGetInputName, const OrtSession *session, size_t index, OrtAllocator *allocator,
            char **value);                                                     /* 36 */
  MX_ORT_FN(SessionGetOutputName, const OrtSession *session, size_t index, OrtAllocator *allocator,
            char **value);                                                     /* 37 */
  MX_ORT_SKIP(38, 48);
  MX_ORT_FN(CreateTensorWithDataAsOrtValue, const OrtMemoryInfo *info, void *p_data, size_t p_data_len,
            const int64_t *shape, size_t shape_len, ONNXTensorElementDataType type, OrtValue **out); /* 49 */
  MX_ORT_SKIP(50, 50);                                                         /* IsTensor */
  MX_ORT_FN(GetTensorMutableData, OrtValue *value, void **out);                /* 51 */
  MX_ORT_SKIP(52, 59);
  MX_ORT_FN(GetTensorElementType, const OrtTensorTypeAndShapeInfo *info, ONNXTensorElementDataType *out); /* 60 */
  MX_ORT_FN(GetDimensionsCount, const OrtTensorTypeAndShapeInfo *info, size_t *out);                       /* 61 */
  MX_ORT_FN(GetDimensions, const OrtTensorTypeAndShapeInfo *info, int64_t *dim_values, size_t dim_values_length); /* 62 */
  MX_ORT_SKIP(63, 64);
  MX_ORT_FN(GetTensorTypeAndShape, const OrtValue *value, OrtTensorTypeAndShapeInfo **out); /* 65 */
  MX_ORT_SKIP(66, 68);
  MX_ORT_FN(CreateCpuMemoryInfo, OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo **out); /* 69 */
  MX_ORT_SKIP(70, 75);
  MX_ORT_FN(AllocatorFree, OrtAllocator *allocator, void *p);                  /* 76 */
  MX_ORT_SKIP(77, 77);                                                         /* AllocatorGetInfo */
  MX_ORT_FN(GetAllocatorWithDefaultOptions, OrtAllocator **out);               /* 78 */
  MX_ORT_SKIP(79, 91);
  void (*ReleaseEnv)(OrtEnv *input);                                           /* 92 */
  void (*ReleaseStatus)(OrtStatus *input);                                     /* 93 */
  void (*ReleaseMemoryInfo)(OrtMemoryInfo *input);                             /* 94 */
  void (*ReleaseSession)(OrtSession *input);                                   /* 95 */
  void (*ReleaseValue)(OrtValue *input);                                       /* 96 */
  MX_ORT_SKIP(97, 98);                                                         /* ReleaseRunOptions, ReleaseTypeInfo */
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *input);     /* 99 */
  void (*ReleaseSessionOptions)(OrtSessionOptions *input);                     /* 100 */
  MX_ORT_SKIP(101, 129);                        /* 101 is the last slot of version 1 (ReleaseCustomOpDomain) */
  MX_ORT_FN(AddSessionConfigEntry, OrtSessionOptions *options, const char *config_key,
            const char *config_value);                                         /* 130 */
  MX_ORT_SKIP(131, 132);                                                       /* CreateAllocator, ReleaseAllocator */
  MX_ORT_FN(RunWithBinding, OrtSession *session, const OrtRunOptions *run_options,
            const OrtIoBinding *binding);                                      /* 133 */
  MX_ORT_FN(CreateIoBinding, OrtSession *session, OrtIoBinding **out);         /* 134 */
  void (*ReleaseIoBinding)(OrtIoBinding *input);                               /* 135 */
  MX_ORT_FN(BindInput, OrtIoBinding *binding, const char *name, const OrtValue *value); /* 136 */
  MX_ORT_SKIP(137, 137);                                                       /* BindOutput */
  MX_ORT_FN(BindOutputToDevice, OrtIoBinding *binding, const char *name, const OrtMemoryInfo *info); /* 138 */
  MX_ORT_SKIP(139, 139);                                                       /* GetBoundOutputNames */
  MX_ORT_FN(GetBoundOutputValues, const OrtIoBinding *binding, OrtAllocator *allocator, OrtValue ***output,
            size_t *output_count);                                             /* 140 */
  /* later slots are not declared: the table is longer, never shorter, in every newer runtime */
};

typedef struct OrtApiBase {
  const OrtApi *(*GetApi)(uint32_t version); /* NULL when the runtime does not serve `version` */
  const char *(*GetVersionString)(void);
} OrtApiBase;

#define MX_ORT_SLOT(name, index) \
  _Static_assert(offsetof(OrtApi, name) == (index) * sizeof(void (*)(void)), "OrtApi slot " #name " is not " #index)
MX_ORT_SLOT(GetErrorMessage, 2);
MX_ORT_SLOT(CreateEnv, 3);
MX_ORT_SLOT(CreateSession, 7);
MX_ORT_SLOT(CreateSessionOptions, 10);
MX_ORT_SLOT(SetSessionExecutionMode, 13);
MX_ORT_SLOT(SetSessionGraphOptimizationLevel, 23);
MX_ORT_SLOT(SetIntraOpNumThreads, 24);
MX_ORT_SLOT(SetInterOpNumThreads, 25);
MX_ORT_SLOT(SessionGetInputCount, 30);
MX_ORT_SLOT(SessionGetOutputCount, 31);
MX_ORT_SLOT(SessionGetInputName, 36);
MX_ORT_SLOT(SessionGetOutputName, 37);
MX_ORT_SLOT(CreateTensorWithDataAsOrtValue, 49);
MX_ORT_SLOT(GetTensorMutableData, 51);
MX_ORT_SLOT(GetTensorElementType, 60);
MX_ORT_SLOT(GetDimensionsCount, 61);
MX_ORT_SLOT(GetDimensions, 62);
MX_ORT_SLOT(GetTensorTypeAndShape, 65);
MX_ORT_SLOT(CreateCpuMemoryInfo, 69);
MX_ORT_SLOT(AllocatorFree, 76);
MX_ORT_SLOT(GetAllocatorWithDefaultOptions, 78);
MX_ORT_SLOT(ReleaseEnv, 92);
MX_ORT_SLOT(ReleaseStatus, 93);
MX_ORT_SLOT(ReleaseMemoryInfo, 94);
MX_ORT_SLOT(ReleaseSession, 95);
MX_ORT_SLOT(ReleaseValue, 96);
MX_ORT_SLOT(ReleaseTensorTypeAndShapeInfo, 99);
MX_ORT_SLOT(ReleaseSessionOptions, 100);
MX_ORT_SLOT(AddSessionConfigEntry, 130);
MX_ORT_SLOT(RunWithBinding, 133);
MX_ORT_SLOT(CreateIoBinding, 134);
MX_ORT_SLOT(ReleaseIoBinding, 135);
MX_ORT_SLOT(BindInput, 136);
MX_ORT_SLOT(BindOutputToDevice, 138);
MX_ORT_SLOT(GetBoundOutputValues, 140);

#endif /* MX_ORT_REAL_HEADER */

/* The one symbol libonnxruntime exports (resolved with dlsym: the program dlopens the library). */
typedef const OrtApiBase *(*MxOrtGetApiBase)(void);

#endif /* MX_ORT_API_H */
