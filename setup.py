"""The compiled parts, two small C extensions:
- otel_assay/collect/_otlpc.c: the OTLP receiver's compiled decoder;
- otel_assay/capture/_capturec.c: the attribute cleaning every captured span goes through, and
  the LangChain adapter's loop over a chat call's message history (each message's JSON is
  cached; the loop joins the cached texts).

Both are optional: where they cannot be built (no C compiler), the package installs without
them and the receiver, the exporter and capture take their Python paths, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("otel_assay.collect._otlpc", ["otel_assay/collect/_otlpc.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    Extension("otel_assay.capture._capturec", ["otel_assay/capture/_capturec.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
])
