"""The trainers' scripts (`python train/ppo.py`, `python train/imitate.py`), from a clone.

The trainers themselves live in `vte.train` (installed with vte; `vte-ppo` and
`vte-imitate` are the same commands). `from train import ppo` and the old module paths
(`train.config`, `train.run`, ...) still import, the latter with a DeprecationWarning.
"""

import vte  # noqa: F401  (installs the finder of old module paths)
