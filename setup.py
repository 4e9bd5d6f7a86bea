"""The compiled part, a small C extension:
- otel_assay/collect/_otlpc.c: the OTLP receiver's compiled protobuf decoder.

It is optional: where it cannot be built (no C compiler), the package installs without it
and the receiver takes its Python path (the generated opentelemetry-proto classes), only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("otel_assay.collect._otlpc", ["otel_assay/collect/_otlpc.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
])
