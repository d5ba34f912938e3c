"""The pickle machine for a weights-only file, written out: a stack, marks and a memo, and the
few opcodes `torch.save` writes (as torch's own `weights_only` unpickler does), read straight
from the pickle's bytes. Nothing here can run code: a GLOBAL is whatever `find_class` maps its
name to (it refuses the rest), REDUCE calls only what `find_class` returned, and BUILD only
sets state on an OrderedDict (which torch allows; the state, `_metadata`, is dropped).

Why not `pickle.Unpickler` with a restricted `find_class`: CPython's C unpickler sizes its memo
by the largest index it is given (one 4-byte LONG_BINPUT of 2**30 asks for 16 GiB), and it
would let BUILD change the allowed functions themselves. Here the memo is a dict, and every
object built is charged (in bytes, a little above what CPython takes) against one budget, so a
small pickle of many tiny objects is refused instead of taking many times its size. Nothing
recurses, so a deeply nested pickle loads as torch loads it."""
import pickletools
import struct
import sys
from collections import OrderedDict

_NAMES = {op.code.encode("latin-1"): op.name for op in pickletools.opcodes}
_MAKES = {"EMPTY_SET": "set", "FROZENSET": "frozenset", "ADDITEMS": "set",
          "SHORT_BINBYTES": "bytes", "BINBYTES": "bytes", "BINBYTES8": "bytes",
          "BYTEARRAY8": "bytearray", "SHORT_BINSTRING": "bytes", "BINSTRING": "bytes",
          "NEWOBJ": "new object", "NEWOBJ_EX": "new object", "OBJ": "new object",
          "INST": "new object", "EXT1": "extension", "EXT2": "extension", "EXT4": "extension"}
# Bytes charged above sys.getsizeof of the object itself: a list or tuple slot (with room for
# growth), a dict entry (its hash table doubles), a memo entry, a tensor (the Tensor, its
# array, its entry among the views)
_ITEM, _ENTRY, _MEMO, TENSOR = 16, 96, 96, 1000


class WeightsPickle:
    """`WeightsPickle(data, find_class, persistent_load, values, budget, bad).load()`: the object
    pickled in `data` (bytes). find_class(module, name) and persistent_load(pid) are the file
    format's; `values` the types (besides None, bool, int, float, str, list, tuple, dict) that
    the loaded object may hold (what the format's callables return); `budget` the bytes it may
    build (`charge` takes from it: the format's callables charge what they build too); `bad`
    turns a cause into the exception to raise."""

    def __init__(self, data, find_class, persistent_load, values, budget, bad):
        self.data, self.pos = data, 0
        self.find_class, self.persistent_load, self.bad = find_class, persistent_load, bad
        self.values = (type(None), bool, int, float, str, list, tuple, dict, *values)
        self.budget, self.stack, self.marks, self.memo = budget, [], [], {}
        self.callables = {}   # id -> what find_class returned: only these are called
        self.internal = {}    # id -> tuple holding something of the machine's (a storage...)

    def charge(self, nbytes, what="objects"):
        self.budget -= nbytes
        if self.budget < 0:
            raise self.bad(f"its {what} would take more memory than the budget (max_bytes; by "
                           f"default 8 times the file's size + 64 MiB): pass a larger max_bytes "
                           f"to load a file you trust")

    def load(self):
        while True:
            code = self.read(1)
            name = _NAMES.get(code)
            if name == "STOP":
                value = self.pop()
                self.check_value(value, "the pickled object")
                return value
            step = getattr(self, "op_" + name, None) if name else None
            if step is None:
                if name in _MAKES:
                    raise self.bad(f"its pickle holds a {_MAKES[name]} (opcode {name}), which "
                                   f"a weights-only file does not")
                raise self.bad(f"its pickle uses the opcode {name or code!r} at byte "
                               f"{self.pos - 1}, which a weights-only file does not")
            step()

    # ------------------------------------------------------------------ reading and the stack
    def read(self, n):
        if self.pos + n > len(self.data):
            raise self.bad("its pickle ends in the middle of an opcode (truncated)")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def unpack(self, layout):
        return struct.unpack(layout, self.read(struct.calcsize(layout)))[0]

    def line(self):
        end = self.data.find(b"\n", self.pos, self.pos + 1000)
        if end < 0:
            raise self.bad("its pickle has a GLOBAL name that does not end within 1000 bytes")
        text = self.data[self.pos:end].decode("utf-8")
        self.pos = end + 1
        return text

    def push(self, value):
        self.charge(sys.getsizeof(value) + _ITEM)
        self.stack.append(value)

    def pop(self):
        if not self.stack:
            raise self.bad("its pickle pops an empty stack")
        return self.stack.pop()

    def top(self, kinds, what):
        if not self.stack or type(self.stack[-1]) not in kinds:
            found = type(self.stack[-1]).__name__ if self.stack else "nothing"
            raise self.bad(f"its pickle {what} a {found}, where a weights-only file has only "
                           f"a {' or '.join(k.__name__ for k in kinds)}")
        return self.stack[-1]

    def pop_mark(self):
        if not self.marks:
            raise self.bad("its pickle closes a MARK it never opened")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def check_value(self, value, where):
        """Only values go into lists and dicts and out of the machine, never a storage or a
        function (nor a tuple holding one)."""
        if not isinstance(value, self.values) or id(value) in self.internal:
            raise self.bad(f"{where} holds a {type(value).__name__}, which a weights-only file "
                           f"does not")

    def tuple(self, items):
        items = tuple(items)
        self.push(items)
        if any(not isinstance(i, self.values) or id(i) in self.internal for i in items):
            self.internal[id(items)] = items   # (kept alive: its id stays its own)

    # ---------------------------------------------------------------------------- opcodes
    def op_PROTO(self):
        self.read(1)

    def op_FRAME(self):
        self.read(8)

    def op_MARK(self):
        self.charge(64)
        self.marks.append(self.stack)
        self.stack = []

    def op_NONE(self):
        self.push(None)

    def op_NEWTRUE(self):
        self.push(True)

    def op_NEWFALSE(self):
        self.push(False)

    def op_BININT(self):
        self.push(self.unpack("<i"))

    def op_BININT1(self):
        self.push(self.read(1)[0])

    def op_BININT2(self):
        self.push(self.unpack("<H"))

    def op_LONG1(self):
        self.push(int.from_bytes(self.read(self.read(1)[0]), "little", signed=True))

    def op_BINFLOAT(self):
        self.push(self.unpack(">d"))

    def string(self, size):
        self.charge(size, "strings")   # before reading: a claimed size is checked by read
        self.push(str(self.read(size), "utf-8", "surrogatepass"))

    def op_SHORT_BINUNICODE(self):
        self.string(self.read(1)[0])

    def op_BINUNICODE(self):
        self.string(self.unpack("<I"))

    def op_BINUNICODE8(self):
        self.string(self.unpack("<Q"))

    def op_EMPTY_LIST(self):
        self.push([])

    def op_EMPTY_DICT(self):
        self.push({})

    def op_EMPTY_TUPLE(self):
        self.push(())

    def op_TUPLE(self):
        self.tuple(self.pop_mark())

    def op_TUPLE1(self):
        self.tuple([self.pop()])

    def op_TUPLE2(self):
        self.tuple(reversed([self.pop(), self.pop()]))

    def op_TUPLE3(self):
        self.tuple(reversed([self.pop(), self.pop(), self.pop()]))

    def op_APPEND(self):
        self.extend([self.pop()])

    def op_APPENDS(self):
        self.extend(self.pop_mark())

    def extend(self, items):
        target = self.top((list,), "appends to")
        for item in items:
            self.check_value(item, "a list")
        self.charge(_ITEM * len(items))
        target.extend(items)

    def op_SETITEM(self):
        value, key = self.pop(), self.pop()
        self.set_items([key, value])

    def op_SETITEMS(self):
        self.set_items(self.pop_mark())

    def set_items(self, items):
        target = self.top((dict, OrderedDict), "sets items of")
        if len(items) % 2:
            raise self.bad("its pickle sets a dict item with no value")
        for key, value in zip(items[::2], items[1::2]):
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise self.bad(f"a dict has the key {key!r:.80} ({type(key).__name__}); "
                               f"minigrad reads str and int keys")
            self.check_value(value, "a dict")
            self.charge(_ENTRY)
            target[key] = value

    def memoize(self, index):
        if not self.stack:
            raise self.bad("its pickle memoizes from an empty stack")
        self.charge(_MEMO if index not in self.memo else 0)
        self.memo[index] = self.stack[-1]

    def op_BINPUT(self):
        self.memoize(self.read(1)[0])

    def op_LONG_BINPUT(self):
        self.memoize(self.unpack("<I"))

    def op_MEMOIZE(self):
        self.memoize(len(self.memo))

    def get(self, index):
        if index not in self.memo:
            raise self.bad(f"its pickle fetches memo entry {index}, which it never stored")
        self.charge(_ITEM)
        self.stack.append(self.memo[index])

    def op_BINGET(self):
        self.get(self.read(1)[0])

    def op_LONG_BINGET(self):
        self.get(self.unpack("<I"))

    def global_(self, module, name):
        found = self.find_class(module, name)
        if callable(found):
            self.callables[id(found)] = found
        self.charge(_ITEM)
        self.stack.append(found)

    def op_GLOBAL(self):
        self.global_(self.line(), self.line())

    def op_STACK_GLOBAL(self):
        name, module = self.pop(), self.pop()
        if not (isinstance(module, str) and isinstance(name, str)):
            raise self.bad("its pickle's STACK_GLOBAL names are not strings")
        self.global_(module, name)

    def op_REDUCE(self):
        arguments, function = self.pop(), self.pop()
        if id(function) not in self.callables or type(arguments) is not tuple:
            raise self.bad(f"its pickle calls {type(function).__name__} with "
                           f"{type(arguments).__name__}; only the functions of a weights-only "
                           f"file are called, with a tuple")
        self.stack.append(function(*arguments))

    def op_BUILD(self):
        state = self.pop()
        self.top((OrderedDict,), "sets the state (BUILD) of")
        if not isinstance(state, dict):   # torch's weights_only: __dict__.update(state)
            raise self.bad(f"its pickle sets an OrderedDict's state to a {type(state).__name__}")
        # (the attributes, a state dict's _metadata, are not loaded)

    def op_BINPERSID(self):
        self.stack.append(self.persistent_load(self.pop()))
