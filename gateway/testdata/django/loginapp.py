"""A tiny Django project for gateway TestDjangoUnicodeUsernames.

POST /login/ runs Django's own AuthenticationForm (the form behind
django.contrib.auth's LoginView), which NFKC-normalizes the username
(UsernameField.to_python) and calls authenticate(): 200 when the
credentials are right, 401 otherwise. One user, carol / right, in an
in-memory SQLite database. It serves on 127.0.0.1 on a free port and
prints "PORT <n>" once it listens.
"""
import sys

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="bulwark-test-only",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],  # fast; test only
    MIDDLEWARE=[],
)
django.setup()

from django.contrib.auth.forms import AuthenticationForm  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402


@csrf_exempt
def login_view(request):
    if request.method != "POST":
        return HttpResponse("login page")
    form = AuthenticationForm(request, data=request.POST)
    if form.is_valid():
        return HttpResponse("welcome " + form.get_user().get_username())
    return HttpResponse("wrong", status=401)


urlpatterns = [path("login/", login_view)]

if __name__ == "__main__":
    call_command("migrate", verbosity=0, interactive=False)
    User.objects.create_user("carol", password="right")

    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from django.core.wsgi import get_wsgi_application

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    srv = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=Quiet)
    print("PORT", srv.server_port, flush=True)
    sys.stdout.flush()
    srv.serve_forever()
