"""The one compiled part: the produce path's record walk (src/logbroker/protocol/_walk.c).

Optional: where no C compiler or Python headers are available the build goes on without it and the broker
uses the same walk in Python (slower on small records, identical answers).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("logbroker.protocol._walk", ["src/logbroker/protocol/_walk.c"], optional=True)])
