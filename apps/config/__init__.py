"""A camera run's configuration as one typed model: the site file (``edgert camera --config
site.yaml``), the command line (its flags are another way of writing the same model), the checks
(``edgert config check``) and the JSON Schema (``edgert config schema``).

    from edgert.apps.config import load_site

    site = load_site("site.yaml")      # ConfigError: every problem, each with its path and line
    site.config                         # apps.camera.options.CameraConfig, what the camera runs on
    site.names, site.version            # the cameras in stream order; a short hash of the content
    site.redacted()                     # the configuration with credentials masked

The model is made from the flags' table (:mod:`.flags`): each component declares its flags once
(``add_arguments``), and the file's sections, their types and the schema are read from them.
"""

from .model import json_schema, site_model
from .site import ConfigError, Site, load_site, load_site_text, site_from_args

__all__ = [
    "ConfigError",
    "Site",
    "json_schema",
    "load_site",
    "load_site_text",
    "site_from_args",
    "site_model",
]
