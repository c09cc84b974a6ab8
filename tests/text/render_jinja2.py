#!/usr/bin/python3
"""Reference renderer for chat_template_test: Python's jinja2 configured as
Hugging Face transformers configures it (trim_blocks, lstrip_blocks,
loopcontrols, raise_exception, strftime_now, its own tojson filter, and
`{% generation %}` blocks rendered as their body).

usage: render_jinja2.py TEMPLATE CONTEXT_JSON NOW_UNIX_SECONDS
Writes the rendering to stdout as UTF-8 bytes, nothing added. If the template
calls raise_exception, writes "RAISE:" + message to stderr and exits 3; any
other error: its description to stderr, exit 2.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext


class TemplateRaise(Exception):
    pass


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers tracks assistant
    spans with it; the text is the body's."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override of jinja2's filter: no HTML escaping, keys unsorted, non-ASCII kept.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    template_path, context_path, now = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    with open(context_path, encoding="utf-8") as f:
        context = json.load(f)

    def raise_exception(message):
        raise TemplateRaise(message)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(fmt)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        text = env.from_string(source).render(**context)
    except TemplateRaise as e:
        sys.stderr.write("RAISE:" + str(e))
        return 3
    except Exception as e:  # noqa: BLE001 - reported to the test as text
        sys.stderr.write("%s: %s" % (type(e).__name__, e))
        return 2
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
