/* A small JSON reader (RFC 8259) for manifest.json and safetensors headers.
 *
 * The whole document is parsed into a tree of mx_json nodes; lookups never fail loudly, they return
 * NULL (or the default) so callers can name the missing field in their own error. Written for the
 * native consumers of multiexport: no third-party code, C99, usable from C and C++.
 */
#ifndef MX_JSON_H
#define MX_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MX_JSON_NULL, MX_JSON_BOOL, MX_JSON_NUMBER, MX_JSON_STRING, MX_JSON_ARRAY, MX_JSON_OBJECT } mx_json_type;

typedef struct mx_json {
  mx_json_type type;
  int boolean;
  double number;
  int64_t integer;     /* exact when is_integer: sizes and offsets past 2^53 stay exact */
  int is_integer;
  char *string;        /* NUL-terminated UTF-8 (strings only) */
  size_t count;        /* elements of an array, members of an object */
  struct mx_json *items;
  char **keys;         /* member names of an object, parallel to items */
} mx_json;

/* Parses `len` bytes of `text`. On error returns NULL and writes a message (with the byte offset) to err. */
mx_json *mx_json_parse(const char *text, size_t len, char *err, size_t err_len);
void mx_json_free(mx_json *value);

/* Member `key` of an object, or NULL (also when `obj` is NULL or not an object). */
const mx_json *mx_json_get(const mx_json *obj, const char *key);
/* Element i of an array, or NULL. */
const mx_json *mx_json_at(const mx_json *arr, size_t i);
/* Number of elements or members, 0 for anything else. */
size_t mx_json_len(const mx_json *value);
/* The string, or `fallback` when `value` is not a string. */
const char *mx_json_str(const mx_json *value, const char *fallback);
/* The integer, or `fallback` when `value` is not an integral number. */
int64_t mx_json_int(const mx_json *value, int64_t fallback);
int mx_json_is(const mx_json *value, mx_json_type type);

#ifdef __cplusplus
}
#endif
#endif
