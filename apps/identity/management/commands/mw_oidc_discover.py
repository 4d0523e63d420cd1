"""The OIDC_OP_* settings of a provider, read from its discovery document once, by an
operator, so the server never reads the network to configure itself."""

import requests
from django.core.management.base import CommandError

from apps.ledger.operator import OperatorCommand

SETTINGS = {  # setting -> the discovery document's field (OpenID Connect Discovery §3)
    "OIDC_OP_ISSUER": "issuer",
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


class Command(OperatorCommand):
    help = ("Print the OIDC_OP_* settings of an OpenID provider from its "
            "/.well-known/openid-configuration (as JSON, or --env lines).")

    def add_arguments(self, parser):
        parser.add_argument("issuer", help="e.g. https://sso.example.com/realms/acme")
        parser.add_argument("--env", action="store_true", help="NAME=value lines for an env file")
        parser.add_argument("--timeout", type=float, default=10)

    def run(self, issuer, timeout=10, **options):
        issuer = issuer.rstrip("/")
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            answer = requests.get(url, timeout=timeout)
            answer.raise_for_status()
            document = answer.json()
        except (requests.RequestException, ValueError) as error:
            raise CommandError(f"could not read {url}: {error}") from None
        if not isinstance(document, dict):
            raise CommandError(f"{url} is not a discovery document")
        missing = [field for field in SETTINGS.values() if not document.get(field)]
        if missing:
            raise CommandError(f"{url} names no {', '.join(missing)}")
        # Discovery §4.3: the document must be the issuer's own.
        if document["issuer"].rstrip("/") != issuer:
            raise CommandError(f"{url} says its issuer is {document['issuer']!r}, not {issuer!r}")
        found = {name: document[field] for name, field in SETTINGS.items()}
        algorithms = document.get("id_token_signing_alg_values_supported") or []
        found["OIDC_RP_SIGN_ALGO"] = "RS256" if "RS256" in algorithms or not algorithms \
            else algorithms[0]
        methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        found["OIDC_TOKEN_USE_BASIC_AUTH"] = "1" if "client_secret_basic" in methods else "0"
        return found

    def handle(self, *args, **options):
        if not options["env"]:
            return super().handle(*args, **options)
        found = self.run(*args, **options)
        self.stdout.write("\n".join(f"{name}={value}" for name, value in found.items()))
        return None
