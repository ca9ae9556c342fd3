"""bayesattn_lite: the helper package of the course "How gradient descent shapes attention".

Every chapter imports it instead of pasting code. One idea per module:

- ``attention``  the single head of the paper and its closed-form gradients (no autograd)
- ``gradcheck``  autograd and finite-difference references to check those formulas against
- ``train``      the one training loop: devices, seeds, parameter groups, history, checkpoints
- ``checks``     exercise checks that explain a wrong answer in words
- ``plots``, ``widgets``  figures and interactive panels used by the chapters
"""

__version__ = "0.1.0"

# Where the course lives. The notebooks' install cells and _config.yml name the same
# repository and version; tests/test_notebooks.py keeps them in step.
REPOSITORY_URL = "https://github.com/bayesattn-course/bayesattn-lite"
