"""`minigrad.utils.data`: torch.utils.data's place under the rename, the same module as
`minigrad.data` (`import minigrad.utils.data`, `from minigrad.utils.data import DataLoader`
and `mg.utils.data.DataLoader` all reach it)."""
import sys

from .. import data

sys.modules[__name__ + ".data"] = data   # the import system finds the submodule here
