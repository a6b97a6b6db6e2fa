/* A tiny CPython extension module: the compat test compiles it with the host's compiler
   and python3 headers into the pack's vendor/ directory, as a pack would ship a native
   dependency (a .so next to its pure modules on PYTHONPATH). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject* add(PyObject* self, PyObject* args) {
  (void)self;
  long a = 0;
  long b = 0;
  if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
  return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS, "a + b"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "compatnative", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_compatnative(void) { return PyModule_Create(&module); }
