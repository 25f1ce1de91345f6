"""The compiled parts: the produce path's record walk (src/logbroker/protocol/_walk.c) and mq's per-message
handle (src/logbroker/mq/_delivery.c), which the garbage collector does not track.

Optional: where no C compiler or Python headers are available the build goes on without it and the broker
uses the same walk in Python (slower on small records, identical answers) and mq a Python handle.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("logbroker.protocol._walk", ["src/logbroker/protocol/_walk.c"], optional=True),
        Extension("logbroker.mq._delivery", ["src/logbroker/mq/_delivery.c"], optional=True),
    ]
)
