/* Recursive-descent JSON parser; see mx_json.h. */
#include "mx_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256 /* manifests nest a few levels; this bounds the recursion on hostile input */

typedef struct {
  const char *s;
  size_t len, pos;
  char *err;
  size_t err_len;
  int failed;
} parser;

static void fail(parser *p, const char *what) {
  if (!p->failed && p->err && p->err_len) snprintf(p->err, p->err_len, "JSON: %s at byte %zu", what, p->pos);
  p->failed = 1;
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return 0;
  p->pos += n;
  return 1;
}

static int hex4(parser *p, unsigned *out) {
  unsigned v = 0;
  if (p->len - p->pos < 4) return 0;
  for (int i = 0; i < 4; i++) {
    char c = p->s[p->pos++];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

static size_t put_utf8(char *dst, unsigned cp) {
  if (cp < 0x80) { dst[0] = (char)cp; return 1; }
  if (cp < 0x800) { dst[0] = (char)(0xC0 | (cp >> 6)); dst[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    dst[0] = (char)(0xE0 | (cp >> 12)); dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  dst[0] = (char)(0xF0 | (cp >> 18)); dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); dst[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Parses a string starting at the opening quote; returns a malloc'd NUL-terminated copy. */
static char *parse_string(parser *p) {
  p->pos++; /* opening quote */
  /* The decoded text is never longer than the source (an escape shrinks or keeps its size). */
  size_t start = p->pos, cap = 1;
  while (p->pos < p->len && p->s[p->pos] != '"') {
    if (p->s[p->pos] == '\\') p->pos++;
    p->pos++;
  }
  if (p->pos >= p->len) { fail(p, "unterminated string"); return NULL; }
  cap += p->pos - start;
  char *out = (char *)malloc(cap);
  if (!out) { fail(p, "out of memory"); return NULL; }
  size_t n = 0;
  p->pos = start;
  while (p->s[p->pos] != '"') {
    unsigned char c = (unsigned char)p->s[p->pos++];
    if (c < 0x20) { fail(p, "control character in string"); free(out); return NULL; }
    if (c != '\\') { out[n++] = (char)c; continue; }
    char e = p->s[p->pos++];
    switch (e) {
      case '"': out[n++] = '"'; break;
      case '\\': out[n++] = '\\'; break;
      case '/': out[n++] = '/'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'n': out[n++] = '\n'; break;
      case 'r': out[n++] = '\r'; break;
      case 't': out[n++] = '\t'; break;
      case 'u': {
        unsigned cp;
        if (!hex4(p, &cp)) { fail(p, "bad \\u escape"); free(out); return NULL; }
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair encodes one code point past U+FFFF */
          unsigned lo;
          if (!literal(p, "\\u") || !hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
            fail(p, "unpaired surrogate"); free(out); return NULL;
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        n += put_utf8(out + n, cp);
        break;
      }
      default: fail(p, "bad escape"); free(out); return NULL;
    }
  }
  p->pos++; /* closing quote */
  out[n] = '\0';
  return out;
}

static int parse_value(parser *p, mx_json *v, int depth);

static int parse_number(parser *p, mx_json *v) {
  size_t start = p->pos;
  int integral = 1;
  if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
  if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9') { fail(p, "bad number"); return 0; }
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c >= '0' && c <= '9') { p->pos++; continue; }
    if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') { integral = 0; p->pos++; continue; }
    break;
  }
  char buf[64];
  size_t n = p->pos - start;
  if (n >= sizeof buf) { fail(p, "number too long"); return 0; }
  memcpy(buf, p->s + start, n);
  buf[n] = '\0';
  char *end;
  v->type = MX_JSON_NUMBER;
  v->number = strtod(buf, &end);
  if (*end) { fail(p, "bad number"); return 0; }
  if (integral) {
    errno = 0;
    v->integer = strtoll(buf, &end, 10);
    v->is_integer = errno == 0;
  }
  return 1;
}

static int grow(parser *p, mx_json *v, size_t *cap, int with_keys) {
  if (v->count < *cap) return 1;
  size_t next = *cap ? *cap * 2 : 4;
  mx_json *items = (mx_json *)realloc(v->items, next * sizeof *items);
  if (!items) { fail(p, "out of memory"); return 0; }
  v->items = items;
  if (with_keys) {
    char **keys = (char **)realloc(v->keys, next * sizeof *keys);
    if (!keys) { fail(p, "out of memory"); return 0; }
    v->keys = keys;
  }
  *cap = next;
  return 1;
}

static int parse_container(parser *p, mx_json *v, int depth, int object) {
  char close = object ? '}' : ']';
  size_t cap = 0;
  v->type = object ? MX_JSON_OBJECT : MX_JSON_ARRAY;
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 1; }
  for (;;) {
    if (!grow(p, v, &cap, object)) return 0;
    if (object) {
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != '"') { fail(p, "expected a member name"); return 0; }
      char *key = parse_string(p);
      if (!key) return 0;
      v->keys[v->count] = key;
      skip_ws(p);
      if (p->pos >= p->len || p->s[p->pos] != ':') { free(key); fail(p, "expected ':'"); return 0; }
      p->pos++;
    }
    memset(&v->items[v->count], 0, sizeof v->items[0]);
    v->count++; /* counted before parsing so a failure frees what was built */
    if (!parse_value(p, &v->items[v->count - 1], depth + 1)) return 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 1; }
    fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    return 0;
  }
}

static int parse_value(parser *p, mx_json *v, int depth) {
  if (depth > MAX_DEPTH) { fail(p, "nesting too deep"); return 0; }
  skip_ws(p);
  if (p->pos >= p->len) { fail(p, "unexpected end"); return 0; }
  char c = p->s[p->pos];
  if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
  if (c == '"') {
    v->type = MX_JSON_STRING;
    v->string = parse_string(p);
    return v->string != NULL;
  }
  if (literal(p, "true")) { v->type = MX_JSON_BOOL; v->boolean = 1; return 1; }
  if (literal(p, "false")) { v->type = MX_JSON_BOOL; return 1; }
  if (literal(p, "null")) { v->type = MX_JSON_NULL; return 1; }
  return parse_number(p, v);
}

static void free_inner(mx_json *v) {
  for (size_t i = 0; i < v->count; i++) {
    free_inner(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->string);
}

mx_json *mx_json_parse(const char *text, size_t len, char *err, size_t err_len) {
  parser p = {text, len, 0, err, err_len, 0};
  mx_json *root = (mx_json *)calloc(1, sizeof *root);
  if (!root) return NULL;
  if (parse_value(&p, root, 0)) {
    skip_ws(&p);
    if (p.pos != p.len) fail(&p, "trailing characters");
  }
  if (p.failed) {
    mx_json_free(root);
    return NULL;
  }
  return root;
}

void mx_json_free(mx_json *value) {
  if (!value) return;
  free_inner(value);
  free(value);
}

const mx_json *mx_json_get(const mx_json *obj, const char *key) {
  if (!obj || obj->type != MX_JSON_OBJECT) return NULL;
  for (size_t i = 0; i < obj->count; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}

const mx_json *mx_json_at(const mx_json *arr, size_t i) {
  if (!arr || arr->type != MX_JSON_ARRAY || i >= arr->count) return NULL;
  return &arr->items[i];
}

size_t mx_json_len(const mx_json *value) {
  return value && (value->type == MX_JSON_ARRAY || value->type == MX_JSON_OBJECT) ? value->count : 0;
}

const char *mx_json_str(const mx_json *value, const char *fallback) {
  return value && value->type == MX_JSON_STRING ? value->string : fallback;
}

int64_t mx_json_int(const mx_json *value, int64_t fallback) {
  return value && value->type == MX_JSON_NUMBER && value->is_integer ? value->integer : fallback;
}

int mx_json_is(const mx_json *value, mx_json_type type) { return value && value->type == type; }
