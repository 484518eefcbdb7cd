/* .npy files (NumPy format versions 1.0, 2.0, 3.0), read and written without NumPy.
 *
 * Only C-order arrays are read (np.save writes C order unless given a Fortran-ordered array; the
 * Python side of multiexport always saves C-contiguous arrays). dtype strings are NumPy's `descr`
 * ('<f4', '|b1', ...); bfloat16 and the float8s have no descr of their own and NumPy writes them as
 * opaque void ('<V2', '<V1'), which mx_dtype (mx_util.h) maps back through the manifest's dtype.
 */
#ifndef MX_NPY_H
#define MX_NPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MX_NPY_MAX_DIMS 32

typedef struct {
  char descr[16];
  int ndim;
  int64_t shape[MX_NPY_MAX_DIMS];
  void *data;     /* malloc'd, 64-byte aligned; nbytes long */
  size_t nbytes;
} mx_npy;

/* Reads `path` into `out`. Returns 0, or -1 with a message in err. */
int mx_npy_read(const char *path, mx_npy *out, char *err, size_t err_len);
/* Writes a C-order array. Returns 0, or -1 with a message in err. */
int mx_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data,
                 size_t nbytes, char *err, size_t err_len);
void mx_npy_free(mx_npy *array);
/* Product of the dimensions (1 for a scalar). */
int64_t mx_num_elements(int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
