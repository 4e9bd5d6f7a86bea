"""The one compiled part: the OTLP receiver's compiled decoder (otel_assay/collect/_otlpc.c).

It is optional: where it cannot be built (no C compiler), the package installs without it
and the receiver reads every request with its Python path, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("otel_assay.collect._otlpc", ["otel_assay/collect/_otlpc.c"],
                             extra_compile_args=["-O2", "-Wall"], optional=True)])
