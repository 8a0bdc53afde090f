"""edgert.quantize: INT8 / FP16 models with an accuracy gate, TensorRT engine builds and the engine cache."""
