"""GPU memory, streams and CUDA graphs on PyCUDA, usable without TensorRT.

Importing this package imports nothing from PyCUDA; each function that needs it imports it and
raises a one-sentence error (with the install line) when it is missing.
"""
