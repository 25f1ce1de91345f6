/*
 * The produce path's per-record check, compiled: the same walk as validate._walk_plain_py over an
 * uncompressed v2 batch (each record's fields must fill exactly its declared length, the records exactly
 * the batch, varints as Java's ByteUtils reads them), returning the smallest and largest timestamp delta.
 *
 * It only says yes: on any defect it returns None and the Python walk runs to name the error with Kafka's
 * code and message, so the two can never disagree on an answer (tests hold them equal on random and
 * mutated batches). Every read is bounds-checked against the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const uint8_t *buf;
    Py_ssize_t end;
    Py_ssize_t pos;
} cursor;

/* Java's readVarint (max_shift 28: at most 5 bytes, wrapped to int32) or readVarlong (max_shift 63: at most
 * 10 bytes, int64), zigzag-decoded. 0 on success, -1 past the end or overlong. */
static int varint(cursor *c, int max_shift, uint64_t mask, int64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    uint8_t b;
    for (;;) {
        if (c->pos >= c->end) return -1;
        b = c->buf[c->pos++];
        if (b < 0x80) break;
        v |= (uint64_t)(b & 0x7F) << shift;
        shift += 7;
        if (shift > max_shift) return -1;
    }
    v = (v | ((uint64_t)b << shift)) & mask;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

static int varint32(cursor *c, int64_t *out) { return varint(c, 28, 0xFFFFFFFFu, out); }

static int varlong(cursor *c, int64_t *out) { return varint(c, 63, UINT64_MAX, out); }

/* Skip a length-prefixed field: a non-positive length is null or empty, nothing to skip. */
static int skip_field(cursor *c) {
    int64_t n;
    if (varint32(c, &n) < 0) return -1;
    if (n > 0) c->pos += (Py_ssize_t)n;
    return 0;
}

static int headers(cursor *c) {
    int64_t count, n;
    if (varint32(c, &count) < 0 || count < 0 || count > c->end - c->pos) return -1;
    for (int64_t h = 0; h < count; h++) {
        if (varint32(c, &n) < 0 || n < 0 || c->end - c->pos < n) return -1;
        c->pos += (Py_ssize_t)n;
        if (varint32(c, &n) < 0) return -1;
        if (n > 0) {
            if (c->end - c->pos < n) return -1;
            c->pos += (Py_ssize_t)n;
        }
    }
    return 0;
}

/* 0 and the delta range when the records are well formed, -1 otherwise. */
static int walk(cursor *c, Py_ssize_t count, int64_t *lo, int64_t *hi) {
    int64_t n, d;
    Py_ssize_t stop;
    *lo = INT64_MAX;
    *hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (varint32(c, &n) < 0 || n < 0) return -1;
        stop = c->pos + (Py_ssize_t)n;
        if (stop > c->end) return -1;
        if (c->pos >= c->end) return -1; /* attributes */
        c->pos++;
        if (varlong(c, &d) < 0) return -1;
        if (d < *lo) *lo = d;
        if (d > *hi) *hi = d;
        if (varint32(c, &n) < 0) return -1; /* offset delta */
        if (skip_field(c) < 0 || skip_field(c) < 0) return -1; /* key, value */
        if (c->pos >= c->end) return -1;
        if (c->buf[c->pos] == 0) {
            c->pos++;
        } else if (headers(c) < 0) {
            return -1;
        }
        if (c->pos != stop) return -1;
    }
    return c->pos == c->end ? 0 : -1;
}

static PyObject *walk_plain(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, count;
    int64_t lo, hi;
    int ok;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &count)) return NULL;
    if (start < 0 || start > view.len || count <= 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    cursor c = {(const uint8_t *)view.buf, view.len, start};
    Py_BEGIN_ALLOW_THREADS
    ok = walk(&c, count, &lo, &hi);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (ok < 0) Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)lo, (long long)hi);
}

static PyMethodDef methods[] = {
    {"walk_plain", walk_plain, METH_VARARGS,
     "walk_plain(batch, start, count) -> (lo, hi) timestamp-delta range, or None if any record is malformed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
