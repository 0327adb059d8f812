"""PURE: sglang as an :class:`~remediate.core.engines.base.Engine`: its readers stay where they grew
(core/unitfile/argv.py, core/startup.py, core/diagnosis/); this folder wraps them behind the seam."""
