/*
 * mq's per-message handle (Producer.send_async), compiled so that the garbage collector does not track it.
 *
 * Every instance of a Python class is a container the collector tracks, and an application that keeps
 * hundreds of thousands of handles (as one collecting futures does) pays for them in every full collection,
 * which then also walks the rest of its heap: 0.6x raw confluent-kafka's send rate in benchmarks/held_handles.py.
 * This type has no Py_TPFLAGS_HAVE_GC, so a handle costs the collector nothing.
 *
 * That is safe because a handle references only its producer and, once acknowledged, a KafkaError (or None):
 * neither can lead back to the handle except through the producer's table of handles with pending callbacks,
 * which the producer empties as each acknowledgement arrives and on close. Everything else (waiting, errors,
 * MessageIDs, callbacks) is the producer's Python code: the handle is the state and librdkafka's callback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *producer; /* the logbroker.mq Producer that made it */
    PyObject *error;    /* NULL while pending; None once acknowledged; else librdkafka's KafkaError */
    long long offset;
    int partition;
    vectorcallfunc vectorcall;
} Delivery;

static PyObject *str_partition, *str_offset, *str_waiting, *str_settle, *str_result, *str_add_done_callback;

/* librdkafka's on_delivery(err, msg): record the answer, then run any add_done_callback()s. */
static PyObject *delivery_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Delivery *self = (Delivery *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a delivery report takes (err, msg)");
        return NULL;
    }
    if (self->error != NULL) /* answered already: librdkafka reports each message once */
        Py_RETURN_NONE;
    PyObject *err = args[0], *msg = args[1];
    if (err == Py_None) {
        PyObject *p = PyObject_CallMethodNoArgs(msg, str_partition);
        if (p == NULL) return NULL;
        long part = PyLong_AsLong(p);
        Py_DECREF(p);
        if (part == -1 && PyErr_Occurred()) return NULL;
        PyObject *o = PyObject_CallMethodNoArgs(msg, str_offset);
        if (o == NULL) return NULL;
        long long off = PyLong_AsLongLong(o);
        Py_DECREF(o);
        if (off == -1 && PyErr_Occurred()) return NULL;
        self->partition = (int)part;
        self->offset = off;
    }
    Py_INCREF(err);
    self->error = err;
    PyObject *waiting = PyObject_GetAttr(self->producer, str_waiting);
    if (waiting == NULL) return NULL;
    int any = PyDict_Check(waiting) ? PyDict_GET_SIZE(waiting) > 0 : PyObject_IsTrue(waiting);
    Py_DECREF(waiting);
    if (any < 0) return NULL;
    if (any) return PyObject_CallMethodOneArg(self->producer, str_settle, op);
    Py_RETURN_NONE;
}

/* Delivery(producer): a pending handle. */
static PyObject *delivery_new_vc(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Delivery(producer) takes exactly one argument");
        return NULL;
    }
    Delivery *self = PyObject_New(Delivery, (PyTypeObject *)type);
    if (self == NULL) return NULL;
    Py_INCREF(args[0]);
    self->producer = args[0];
    self->error = NULL;
    self->offset = -1;
    self->partition = -1;
    self->vectorcall = delivery_call;
    return (PyObject *)self;
}

static PyObject *delivery_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Delivery(producer) takes no keyword arguments");
        return NULL;
    }
    return delivery_new_vc((PyObject *)type, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
}

static void delivery_dealloc(PyObject *op) {
    Delivery *self = (Delivery *)op;
    Py_XDECREF(self->producer);
    Py_XDECREF(self->error);
    PyObject_Free(op);
}

static PyObject *delivery_done(PyObject *op, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(((Delivery *)op)->error != NULL);
}

/* result(timeout=None) and add_done_callback(fn): the producer's Python code decides. */
static PyObject *delivery_result(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *timeout = Py_None;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_SetString(PyExc_TypeError, "result() takes at most one argument (timeout)");
        return NULL;
    }
    if (nargs == 1) {
        timeout = args[0];
    } else if (nkw == 1) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0))
            || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "timeout") != 0) {
            PyErr_SetString(PyExc_TypeError, "result() got an unexpected keyword argument");
            return NULL;
        }
        timeout = args[0];
    }
    PyObject *call[4] = {NULL, ((Delivery *)op)->producer, op, timeout}; /* call[0]: the offset's spare slot */
    return PyObject_VectorcallMethod(str_result, call + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *delivery_add_done_callback(PyObject *op, PyObject *fn) {
    PyObject *call[4] = {NULL, ((Delivery *)op)->producer, op, fn};
    return PyObject_VectorcallMethod(str_add_done_callback, call + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *delivery_get_error(PyObject *op, void *Py_UNUSED(closure)) {
    Delivery *self = (Delivery *)op;
    if (self->error == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_error: not acknowledged yet");
        return NULL;
    }
    return Py_NewRef(self->error);
}

static PyObject *delivery_get_producer(PyObject *op, void *Py_UNUSED(closure)) {
    return Py_NewRef(((Delivery *)op)->producer);
}

static PyObject *delivery_repr(PyObject *op) {
    Delivery *self = (Delivery *)op;
    if (self->error == NULL) return PyUnicode_FromString("<Delivery pending>");
    if (self->error == Py_None)
        return PyUnicode_FromFormat("<Delivery partition=%d offset=%lld>", self->partition, self->offset);
    return PyUnicode_FromFormat("<Delivery failed: %R>", self->error);
}

static PyMethodDef delivery_methods[] = {
    {"done", delivery_done, METH_NOARGS, "Whether the broker answered (acknowledged or failed)."},
    {"result", (PyCFunction)(void (*)(void))delivery_result, METH_FASTCALL | METH_KEYWORDS,
     "result(timeout=None): the MessageID once acknowledged; raises the delivery error."},
    {"add_done_callback", delivery_add_done_callback, METH_O,
     "add_done_callback(fn): call fn(delivery) once answered, on the producer's poll thread."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef delivery_members[] = {
    {"_partition", T_INT, offsetof(Delivery, partition), READONLY, NULL},
    {"_offset", T_LONGLONG, offsetof(Delivery, offset), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef delivery_getset[] = {
    {"_error", delivery_get_error, NULL, "None once acknowledged, librdkafka's KafkaError if it failed", NULL},
    {"_producer", delivery_get_producer, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DeliveryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "logbroker.mq._delivery.Delivery",
    .tp_doc = "The pending acknowledgement of one sent message (not tracked by the garbage collector).",
    .tp_basicsize = sizeof(Delivery),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = delivery_new,
    .tp_vectorcall = delivery_new_vc,
    .tp_dealloc = delivery_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Delivery, vectorcall),
    .tp_repr = delivery_repr,
    .tp_methods = delivery_methods,
    .tp_members = delivery_members,
    .tp_getset = delivery_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "logbroker.mq._delivery", "mq's untracked per-message handle.", -1, NULL,
};

PyMODINIT_FUNC PyInit__delivery(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(str_partition, "partition");
    INTERN(str_offset, "offset");
    INTERN(str_waiting, "_waiting");
    INTERN(str_settle, "_settle");
    INTERN(str_result, "_result");
    INTERN(str_add_done_callback, "_add_done_callback");
#undef INTERN
    if (PyType_Ready(&DeliveryType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&DeliveryType);
    if (PyModule_AddObject(m, "Delivery", (PyObject *)&DeliveryType) < 0) {
        Py_DECREF(&DeliveryType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
