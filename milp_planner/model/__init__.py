"""The model layer: the layer graph, the ONNX importer, the zoo of built-in models."""
