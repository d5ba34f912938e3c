"""The few messages of Caffe's caffe.proto that minigrad reads and writes, as protobuf classes.

Only the fields needed are declared, with the field numbers of Caffe's public caffe.proto, so
the bytes are Caffe's; fields not declared here (solver settings, fillers, data layers' params)
are skipped when reading. The schema is written below in a small line format, one field a line
(`label type name = number [default=value] [packed]`), and turned into a protobuf file
descriptor in a private descriptor pool, so it never clashes with a caffe_pb2 the user has
imported. Needs the `protobuf` package (the `caffe` extra); `messages()` says so if missing.
"""
import functools

# Caffe's deprecated V1LayerParameter names layer types by an enum; the current format by the
# string Caffe's upgrade_proto gives each: {enum name: (enum number, current type name)}.
V1_LAYER_TYPES = {
    "NONE": (0, ""), "ABSVAL": (35, "AbsVal"), "ACCURACY": (1, "Accuracy"),
    "ARGMAX": (30, "ArgMax"), "BNLL": (2, "BNLL"), "CONCAT": (3, "Concat"),
    "CONTRASTIVE_LOSS": (37, "ContrastiveLoss"), "CONVOLUTION": (4, "Convolution"),
    "DATA": (5, "Data"), "DECONVOLUTION": (39, "Deconvolution"), "DROPOUT": (6, "Dropout"),
    "DUMMY_DATA": (32, "DummyData"), "EUCLIDEAN_LOSS": (7, "EuclideanLoss"),
    "ELTWISE": (25, "Eltwise"), "EXP": (38, "Exp"), "FLATTEN": (8, "Flatten"),
    "HDF5_DATA": (9, "HDF5Data"), "HDF5_OUTPUT": (10, "HDF5Output"),
    "HINGE_LOSS": (28, "HingeLoss"), "IM2COL": (11, "Im2col"), "IMAGE_DATA": (12, "ImageData"),
    "INFOGAIN_LOSS": (13, "InfogainLoss"), "INNER_PRODUCT": (14, "InnerProduct"),
    "LRN": (15, "LRN"), "MEMORY_DATA": (29, "MemoryData"),
    "MULTINOMIAL_LOGISTIC_LOSS": (16, "MultinomialLogisticLoss"), "MVN": (34, "MVN"),
    "POOLING": (17, "Pooling"), "POWER": (26, "Power"), "RELU": (18, "ReLU"),
    "SIGMOID": (19, "Sigmoid"), "SIGMOID_CROSS_ENTROPY_LOSS": (27, "SigmoidCrossEntropyLoss"),
    "SILENCE": (36, "Silence"), "SOFTMAX": (20, "Softmax"),
    "SOFTMAX_LOSS": (21, "SoftmaxWithLoss"), "SPLIT": (22, "Split"), "SLICE": (33, "Slice"),
    "TANH": (23, "TanH"), "WINDOW_DATA": (24, "WindowData"), "THRESHOLD": (31, "Threshold"),
}

# NVIDIA Caffe's blobs may hold their values as raw little-endian bytes (raw_data, with
# raw_data_type): float16 models do. {Type: NumPy dtype}; INT and UINT are not weights.
RAW_DTYPES = {"DOUBLE": "<f8", "FLOAT": "<f4", "FLOAT16": "<f2"}

# The layer-parameter messages read_prototxt reports; V1 layers have only the last three.
PARAMS = ("batch_norm_param", "scale_param", "convolution_param", "inner_product_param",
          "pooling_param")

_SCHEMA = """
message BlobShape
  repeated int64 dim = 1 packed
message BlobProto
  enum Type DOUBLE=0 FLOAT=1 FLOAT16=2 INT=3 UINT=4
  optional BlobShape shape = 7
  repeated float data = 5 packed
  repeated double double_data = 8 packed
  optional Type raw_data_type = 10
  optional bytes raw_data = 12
  optional int32 num = 1
  optional int32 channels = 2
  optional int32 height = 3
  optional int32 width = 4
message NetParameter
  optional string name = 1
  repeated LayerParameter layer = 100
  repeated V1LayerParameter layers = 2
message LayerParameter
  optional string name = 1
  optional string type = 2
  repeated string bottom = 3
  repeated string top = 4
  repeated BlobProto blobs = 7
  optional BatchNormParameter batch_norm_param = 139
  optional ScaleParameter scale_param = 142
  optional ConvolutionParameter convolution_param = 106
  optional InnerProductParameter inner_product_param = 117
  optional PoolingParameter pooling_param = 121
message V1LayerParameter
  enum LayerType
  repeated string bottom = 2
  repeated string top = 3
  optional string name = 4
  optional LayerType type = 5
  repeated BlobProto blobs = 6
  optional ConvolutionParameter convolution_param = 10
  optional InnerProductParameter inner_product_param = 17
  optional PoolingParameter pooling_param = 19
message BatchNormParameter
  optional bool use_global_stats = 1
  optional float moving_average_fraction = 2 default=0.999
  optional float eps = 3 default=1e-5
message ScaleParameter
  optional int32 axis = 1 default=1
  optional int32 num_axes = 2 default=1
  optional bool bias_term = 4 default=false
message ConvolutionParameter
  optional uint32 num_output = 1
  optional bool bias_term = 2 default=true
  repeated uint32 pad = 3
  repeated uint32 kernel_size = 4
  repeated uint32 stride = 6
  repeated uint32 dilation = 18
  optional uint32 pad_h = 9 default=0
  optional uint32 pad_w = 10 default=0
  optional uint32 kernel_h = 11
  optional uint32 kernel_w = 12
  optional uint32 stride_h = 13
  optional uint32 stride_w = 14
  optional uint32 group = 5 default=1
  optional int32 axis = 16 default=1
message InnerProductParameter
  optional uint32 num_output = 1
  optional bool bias_term = 2 default=true
  optional int32 axis = 5 default=1
  optional bool transpose = 6 default=false
message PoolingParameter
  enum PoolMethod MAX=0 AVE=1 STOCHASTIC=2
  optional PoolMethod pool = 1 default=MAX
  optional uint32 pad = 4 default=0
  optional uint32 pad_h = 9 default=0
  optional uint32 pad_w = 10 default=0
  optional uint32 kernel_size = 2
  optional uint32 kernel_h = 5
  optional uint32 kernel_w = 6
  optional uint32 stride = 3 default=1
  optional uint32 stride_h = 7
  optional uint32 stride_w = 8
  optional bool global_pooling = 12 default=false
"""

_PACKAGE = "caffe"


def _enum_values(message_name, words):
    """(name, number) pairs of an enum line; V1's LayerType comes from V1_LAYER_TYPES."""
    if message_name == "V1LayerParameter":
        return [(name, number) for name, (number, _) in V1_LAYER_TYPES.items()]
    return [(name, int(number)) for name, number in (word.split("=") for word in words)]


def _file_descriptor():
    """_SCHEMA as a FileDescriptorProto (proto2, package caffe)."""
    from google.protobuf import descriptor_pb2

    field_proto = descriptor_pb2.FieldDescriptorProto
    scalars = {"string": field_proto.TYPE_STRING, "bytes": field_proto.TYPE_BYTES,
               "bool": field_proto.TYPE_BOOL,
               "float": field_proto.TYPE_FLOAT, "double": field_proto.TYPE_DOUBLE,
               "int32": field_proto.TYPE_INT32, "uint32": field_proto.TYPE_UINT32,
               "int64": field_proto.TYPE_INT64}
    labels = {"optional": field_proto.LABEL_OPTIONAL, "repeated": field_proto.LABEL_REPEATED}
    file = descriptor_pb2.FileDescriptorProto(name="minigrad_caffe.proto", package=_PACKAGE,
                                              syntax="proto2")
    message = None
    for line in _SCHEMA.strip().splitlines():
        words = line.split()
        if words[0] == "message":
            message = file.message_type.add(name=words[1])
        elif words[0] == "enum":
            enum = message.enum_type.add(name=words[1])
            for name, number in _enum_values(message.name, words[2:]):
                enum.value.add(name=name, number=number)
        else:
            label, kind, name, _, number, *options = words
            field = message.field.add(name=name, number=int(number), label=labels[label])
            if kind in scalars:
                field.type = scalars[kind]
            elif any(enum.name == kind for enum in message.enum_type):
                field.type = field_proto.TYPE_ENUM
                field.type_name = f".{_PACKAGE}.{message.name}.{kind}"
            else:
                field.type, field.type_name = field_proto.TYPE_MESSAGE, f".{_PACKAGE}.{kind}"
            for option in options:
                if option == "packed":
                    field.options.packed = True
                else:
                    field.default_value = option.removeprefix("default=")
    return file


@functools.cache
def messages():
    """{message name: protobuf class} for the schema above; ImportError without protobuf."""
    try:
        from google.protobuf import descriptor_pool, message_factory
    except ImportError:
        raise ImportError("reading and writing Caffe model files needs the protobuf package: "
                          "pip install 'minigrad[caffe]' (or pip install protobuf)") from None
    pool = descriptor_pool.DescriptorPool()
    file = pool.Add(_file_descriptor())
    return {name: message_factory.GetMessageClass(descriptor)
            for name, descriptor in pool.FindFileByName(file.name).message_types_by_name.items()}
