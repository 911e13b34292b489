"""Help pages of cfbench's commands: options listed under headings.

Click prints a command's options as one flat list and has no option groups; the packages that add them
(click-option-group, rich-click) are not dependencies, and overriding `format_options` is all it takes, so
`SectionedCommand` does it here.
"""

from __future__ import annotations

import click


class SectionedCommand(click.Command):
    """A command whose help lists the options named in `sections` (heading -> option names, in order) under those
    headings, and every other option (--help among them) under "Options" first."""

    def __init__(self, *args, sections: dict[str, tuple[str, ...]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections or {}
        names = {p.name for p in self.params}
        unknown = sorted({n for members in self.sections.values() for n in members} - names)
        if unknown:
            raise ValueError(f"{self.name}: help sections name options it does not have: {unknown}")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        records = {name: record for name, record in records.items() if record is not None}
        placed = {n for members in self.sections.values() for n in members}
        headings = {"Options": [name for name in records if name not in placed], **self.sections}
        for heading, members in headings.items():
            rows = [records[n] for n in members if n in records]
            if rows:
                with formatter.section(heading):
                    formatter.write_dl(rows)
