"""Print the configuration reference (Markdown) from the settings models: docs/configuration.md.

    python tools/settings_reference.py
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gpuslice.agent.settings import AgentSettings
from gpuslice.manager.settings import ManagerSettings


def rows(model: type[BaseModel], env: str, toml: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += rows(annotation, f"{env}{name.upper()}__", f"{toml}{name}.")
            continue
        out.append(f"| `{toml}{name}` | `{env}{name.upper()}` | {_default(info)} | "
                   f"{(info.description or '').replace('|', '/')} |")
    return out


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "(computed)"
    value = info.default
    return "" if value is None else f"`{value}`"


def main() -> None:
    for title, model, env in (
        ("Manager (`gpuslice manager serve --config FILE`, `gpuslice up`)", ManagerSettings,
         "GPUSLICE_"),
        ("Agent (`gpuslice agent serve --config FILE`)", AgentSettings, "GPUSLICE_AGENT_"),
    ):
        print(f"### {title}\n")
        print("| TOML key | environment | default | meaning |")
        print("|---|---|---|---|")
        print("\n".join(rows(model, env)))
        print()


if __name__ == "__main__":
    main()
