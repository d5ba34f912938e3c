"""Caffe interop: batch-norm blob layouts (blobs.py) and whole models to and from a .caffemodel
(model.py); the .caffemodel / .prototxt files themselves are a file format, read and written in
minigrad/formats/caffe.py (with the protobuf schema in formats/caffe_schema.py).

The file functions need the `protobuf` package (`pip install 'minigrad[caffe]'`); the blob
converters need only NumPy.
"""
from ...formats.caffe import (
    CaffeFormatError,
    CaffeLayer,
    PrototxtLayer,
    read_caffemodel,
    read_prototxt,
    write_caffemodel,
)
from .blobs import (
    from_bvlc,
    from_nvcaffe,
    momentum_from_moving_average_fraction,
    moving_average_fraction_from_momentum,
    to_bvlc,
    to_nvcaffe,
)
from .model import caffe_layers, load_caffe, save_caffe

__all__ = ["CaffeFormatError", "CaffeLayer", "PrototxtLayer", "caffe_layers", "from_bvlc",
           "from_nvcaffe", "load_caffe", "momentum_from_moving_average_fraction",
           "moving_average_fraction_from_momentum", "read_caffemodel", "read_prototxt",
           "save_caffe", "to_bvlc", "to_nvcaffe", "write_caffemodel"]
