<?php
// A Symfony front controller (Debian's php-symfony-http-foundation and
// php-symfony-routing) run by `php -S ADDR -t DIR DIR/index.php`, for
// gateway/frameworks_e2e_test.go. Symfony routes on the path info after
// the script: "/index.php/login" reaches the "/login" route.
require_once 'Symfony/Component/HttpFoundation/autoload.php';
require_once 'Symfony/Component/Routing/autoload.php';

use Symfony\Component\HttpFoundation\Request;
use Symfony\Component\HttpFoundation\Response;
use Symfony\Component\Routing\Exception\ExceptionInterface;
use Symfony\Component\Routing\Matcher\UrlMatcher;
use Symfony\Component\Routing\RequestContext;
use Symfony\Component\Routing\Route;
use Symfony\Component\Routing\RouteCollection;

$routes = new RouteCollection();
$routes->add('login', new Route('/login', [], [], [], '', [], ['POST']));
$routes->add('hits', new Route('/hits', [], [], [], '', [], ['GET']));
$request = Request::createFromGlobals();
$matcher = new UrlMatcher($routes, (new RequestContext())->fromRequest($request));
// The counter lives beside the hits file the test names.
$counter = getenv('BULWARK_TEST_HITS');
try {
    $m = $matcher->match($request->getPathInfo());
} catch (ExceptionInterface $e) {
    (new Response("no route\n", 404))->send();
    return;
}
if ($m['_route'] === 'hits') {
    (new Response((string)(int)@file_get_contents($counter)))->send();
    return;
}
$f = fopen($counter, 'c+');
flock($f, LOCK_EX);
$n = (int)stream_get_contents($f) + 1;
ftruncate($f, 0);
rewind($f);
fwrite($f, (string)$n);
flock($f, LOCK_UN);
fclose($f);
(new Response('login uri=' . $request->getRequestUri() . "\n"))->send();
