from .loop import *
from .defaults import *
