#!/usr/bin/env python3
"""A local webhook receiver for the demo: prints one line per notification
it receives and appends the JSON body to a file.

usage: webhook_receiver.py PORT OUTFILE
"""
import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        with open(sys.argv[2], 'ab') as f:
            f.write(body + b'\n')
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == '__main__':
    http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), Handler).serve_forever()
