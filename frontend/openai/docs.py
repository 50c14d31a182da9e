"""/docs, /docs/oauth2-redirect and /redoc: FastAPI 0.136's pages, as vLLM serves them.

vLLM's app is ``FastAPI()`` (title "FastAPI"): Swagger UI and ReDoc load their
scripts from FastAPI's default CDN URLs and read ``/openapi.json``. The pages
below are FastAPI's ``get_swagger_ui_html``, ``get_swagger_ui_oauth2_redirect_html``
and ``get_redoc_html`` output, byte for byte (tests/test_operational_parity.py
compares them with vLLM's server). ``--disable-fastapi-docs`` removes them
with /openapi.json. vLLM's ``--enable-offline-docs`` (vendored scripts under
/static) is not implemented: the flag is recorded and ignored.
"""

from __future__ import annotations

from aiohttp import web

from frontend.openai.route import Handler

SWAGGER_JS = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"
SWAGGER_CSS = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css"
REDOC_JS = "https://cdn.jsdelivr.net/npm/redoc@2/bundles/redoc.standalone.js"
FAVICON = "https://fastapi.tiangolo.com/img/favicon.png"
OPENAPI_URL = "/openapi.json"
DOCS, OAUTH2, REDOC = "/docs", "/docs/oauth2-redirect", "/redoc"


def _html(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html")


def pages(root_path: str = "") -> list[tuple[str, Handler]]:
    """(path, handler) of every docs page (GET; not in /openapi.json, as FastAPI's);
    under --root-path the pages load the prefixed document, as FastAPI's do."""
    swagger = _page(_swagger_ui(root_path))
    oauth2 = _page(OAUTH2_REDIRECT)
    redoc = _page(_redoc(root_path))
    return [(DOCS, swagger), (OAUTH2, oauth2), (REDOC, redoc)]


def _page(text: str) -> Handler:
    async def page(request: web.Request) -> web.Response:
        return _html(text)

    return page


# fmt: off
_SWAGGER_UI = (
    '\n'
    '    <!DOCTYPE html>\n'
    '    <html>\n'
    '    <head>\n'
    '    <meta name="viewport" content="width=device-width, initial-scale=1.0">\n'
    '    <link type="text/css" rel="stylesheet" href="@CSS@">\n'
    '    <link rel="shortcut icon" href="@FAVICON@">\n'
    '    <title>FastAPI - Swagger UI</title>\n'
    '    </head>\n'
    '    <body>\n'
    '    <div id="swagger-ui">\n'
    '    </div>\n'
    '    <script src="@JS@"></script>\n'
    '    <!-- `SwaggerUIBundle` is now available on the page -->\n'
    '    <script>\n'
    '    const ui = SwaggerUIBundle({\n'
    "        url: '@OPENAPI@',\n"
    '    "dom_id": "#swagger-ui",\n'
    '"layout": "BaseLayout",\n'
    '"deepLinking": true,\n'
    '"showExtensions": true,\n'
    '"showCommonExtensions": true,\n'
    "oauth2RedirectUrl: window.location.origin + '@OAUTH2@',\n"
    '    presets: [\n'
    '        SwaggerUIBundle.presets.apis,\n'
    '        SwaggerUIBundle.SwaggerUIStandalonePreset\n'
    '        ],\n'
    '    })\n'
    '    </script>\n'
    '    </body>\n'
    '    </html>\n'
    '    '
)

_REDOC = (
    '\n'
    '    <!DOCTYPE html>\n'
    '    <html>\n'
    '    <head>\n'
    '    <title>FastAPI - ReDoc</title>\n'
    '    <!-- needed for adaptive design -->\n'
    '    <meta charset="utf-8"/>\n'
    '    <meta name="viewport" content="width=device-width, initial-scale=1">\n'
    '    \n'
    '    <link'
    ' href="https://fonts.googleapis.com/css?family=Montserrat:300,400,700|Roboto:300'
    ',400,700" rel="stylesheet">\n'
    '    \n'
    '    <link rel="shortcut icon" href="@FAVICON@">\n'
    '    <!--\n'
    "    ReDoc doesn't change outer page styles\n"
    '    -->\n'
    '    <style>\n'
    '      body {\n'
    '        margin: 0;\n'
    '        padding: 0;\n'
    '      }\n'
    '    </style>\n'
    '    </head>\n'
    '    <body>\n'
    '    <noscript>\n'
    '        ReDoc requires Javascript to function. Please enable it to browse the'
    ' documentation.\n'
    '    </noscript>\n'
    '    <redoc spec-url="@OPENAPI@"></redoc>\n'
    '    <script src="@REDOC_JS@"> </script>\n'
    '    </body>\n'
    '    </html>\n'
    '    '
)

OAUTH2_REDIRECT = (
    '\n'
    '    <!doctype html>\n'
    '    <html lang="en-US">\n'
    '    <head>\n'
    '        <title>Swagger UI: OAuth2 Redirect</title>\n'
    '    </head>\n'
    '    <body>\n'
    '    <script>\n'
    "        'use strict';\n"
    '        function run () {\n'
    '            var oauth2 = window.opener.swaggerUIRedirectOauth2;\n'
    '            var sentState = oauth2.state;\n'
    '            var redirectUrl = oauth2.redirectUrl;\n'
    '            var isValid, qp, arr;\n'
    '\n'
    '            if (/code|token|error/.test(window.location.hash)) {\n'
    "                qp = window.location.hash.substring(1).replace('?', '&');\n"
    '            } else {\n'
    '                qp = location.search.substring(1);\n'
    '            }\n'
    '\n'
    '            arr = qp.split("&");\n'
    '            arr.forEach(function (v,i,_arr) { _arr[i] = \'"\' + v.replace(\'=\','
    ' \'":"\') + \'"\';});\n'
    "            qp = qp ? JSON.parse('{' + arr.join() + '}',\n"
    '                    function (key, value) {\n'
    '                        return key === "" ? value : decodeURIComponent(value);\n'
    '                    }\n'
    '            ) : {};\n'
    '\n'
    '            isValid = qp.state === sentState;\n'
    '\n'
    '            if ((\n'
    '              oauth2.auth.schema.get("flow") === "accessCode" ||\n'
    '              oauth2.auth.schema.get("flow") === "authorizationCode" ||\n'
    '              oauth2.auth.schema.get("flow") === "authorization_code"\n'
    '            ) && !oauth2.auth.code) {\n'
    '                if (!isValid) {\n'
    '                    oauth2.errCb({\n'
    '                        authId: oauth2.auth.name,\n'
    '                        source: "auth",\n'
    '                        level: "warning",\n'
    '                        message: "Authorization may be unsafe, passed state was'
    ' changed in server. The passed state wasn\'t returned from auth server."\n'
    '                    });\n'
    '                }\n'
    '\n'
    '                if (qp.code) {\n'
    '                    delete oauth2.state;\n'
    '                    oauth2.auth.code = qp.code;\n'
    '                    oauth2.callback({auth: oauth2.auth, redirectUrl: redirectUrl});\n'
    '                } else {\n'
    '                    let oauthErrorMsg;\n'
    '                    if (qp.error) {\n'
    '                        oauthErrorMsg = "["+qp.error+"]: " +\n'
    '                            (qp.error_description ? qp.error_description+ ". "'
    ' : "no accessCode received from the server. ") +\n'
    '                            (qp.error_uri ? "More info: "+qp.error_uri : "");\n'
    '                    }\n'
    '\n'
    '                    oauth2.errCb({\n'
    '                        authId: oauth2.auth.name,\n'
    '                        source: "auth",\n'
    '                        level: "error",\n'
    '                        message: oauthErrorMsg || "[Authorization failed]: no'
    ' accessCode received from the server."\n'
    '                    });\n'
    '                }\n'
    '            } else {\n'
    '                oauth2.callback({auth: oauth2.auth, token: qp, isValid:'
    ' isValid, redirectUrl: redirectUrl});\n'
    '            }\n'
    '            window.close();\n'
    '        }\n'
    '\n'
    "        if (document.readyState !== 'loading') {\n"
    '            run();\n'
    '        } else {\n'
    "            document.addEventListener('DOMContentLoaded', function () {\n"
    '                run();\n'
    '            });\n'
    '        }\n'
    '    </script>\n'
    '    </body>\n'
    '    </html>\n'
    '        '
)
# fmt: on


def _swagger_ui(root_path: str) -> str:
    return (
        _SWAGGER_UI.replace("@CSS@", SWAGGER_CSS)
        .replace("@JS@", SWAGGER_JS)
        .replace("@FAVICON@", FAVICON)
        .replace("@OPENAPI@", root_path + OPENAPI_URL)
        .replace("@OAUTH2@", root_path + OAUTH2)
    )


def _redoc(root_path: str) -> str:
    return (
        _REDOC.replace("@REDOC_JS@", REDOC_JS)
        .replace("@FAVICON@", FAVICON)
        .replace("@OPENAPI@", root_path + OPENAPI_URL)
    )
