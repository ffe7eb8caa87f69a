"""Agent skills: bundles of files with a SKILL.md manifest, mounted read-only in a container (docs/skills.md)."""
