package savingspage

// pageHTML is the page: plain HTML and inline SVG, no script, no external
// asset. Every figure carries its raw value in a data- attribute so that a
// test can read the rendered page.
const pageHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gemini-proxy savings</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 60em; }
h1 { font-size: 1.4em; margin-bottom: 0; }
h2 { font-size: 1.1em; margin-top: 2em; }
p.meta { color: #666; margin-top: .2em; }
table { border-collapse: collapse; }
th, td { padding: .2em .8em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; white-space: nowrap; }
td.header { font-family: ui-monospace, monospace; text-align: left; }
.a { fill: #b0b0b0; } .b { fill: #2b6cb0; }
svg text { font: 11px system-ui, sans-serif; fill: #444; }
.legend span { display: inline-block; width: .8em; height: .8em; margin: 0 .3em 0 1em; }
.legend .a { background: #b0b0b0; } .legend .b { background: #2b6cb0; }
</style>
</head>
<body>
<h1>gemini-proxy savings</h1>
<p class="meta">{{.Now}}, up {{.Uptime}}. Estimates as in <a href="/metrics">/metrics</a>; the Grafana dashboard shows a fleet.</p>

<h2>Summary</h2>
<table id="summary">
<tr><th></th><th>since start</th><th>{{.LastHourLabel}}</th></tr>
{{range .Rows}}<tr id="{{.ID}}" data-total="{{.TotalValue}}" data-hour="{{.HourValue}}"><td>{{.Label}}</td><td>{{.Total}}</td><td>{{.Hour}}</td></tr>
{{end}}</table>

<h2>By model</h2>
{{if .Models}}<table id="by-model">
<tr><th>model</th><th>generate requests</th><th>tokens saved</th><th>net dollars saved</th><th>tokens saved, {{.LastHourLabel}}</th></tr>
{{range .Models}}<tr data-name="{{.Name}}" data-tokens="{{.TokensValue}}" data-dollars="{{.DollarsValue}}"><td>{{.Name}}</td><td>{{.Requests}}</td><td>{{.Tokens}}</td><td>{{.Dollars}}</td><td>{{.Hour}}</td></tr>
{{end}}</table>{{else}}<p>No generate request yet.</p>{{end}}

<h2>By rule</h2>
<p>Dollars are priced per request, not per rule (the ledger); tokens are estimated per rule.</p>
{{if .Rules}}<table id="by-rule">
<tr><th>rule</th><th>tokens saved</th><th>tokens saved, {{.LastHourLabel}}</th></tr>
{{range .Rules}}<tr data-name="{{.Name}}" data-tokens="{{.TokensValue}}"><td>{{.Name}}</td><td>{{.Tokens}}</td><td>{{.Hour}}</td></tr>
{{end}}</table>{{else}}<p>No rule has saved anything yet.</p>{{end}}

{{with .ConvChart}}<h2>{{$.ConvTitle}}</h2>
<p>Prompt tokens per turn, {{$.NaiveTotal}} naive against {{$.ProxiedTotal}} through the proxy: {{$.ConvSavedShare}} saved.
<span class="legend"><span class="a"></span>{{.LabelA}}<span class="b"></span>{{.LabelB}}</span></p>
{{template "chart" .}}{{end}}

<h2>Recent requests</h2>
{{if .Recent}}{{with .RecentChart}}<p>Request bytes, oldest left.<span class="legend"><span class="a"></span>{{.LabelA}}<span class="b"></span>{{.LabelB}}</span></p>
{{template "chart" .}}{{end}}
<table id="recent">
<tr><th>time (UTC)</th><th>model</th><th>status</th><th>X-Gemini-Proxy-Report</th></tr>
{{range .Recent}}<tr><td>{{.At}}</td><td>{{.Model}}</td><td>{{.Status}}</td><td class="header">{{.Header}}</td></tr>
{{end}}</table>{{else}}<p>No generate request yet.</p>{{end}}
</body>
</html>
{{define "chart"}}<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img">
<line x1="0" y1="{{.Base}}" x2="{{.Width}}" y2="{{.Base}}" stroke="#999"/>
<text x="4" y="10">max {{.Max}}</text>
{{range .Groups}}<rect class="a" x="{{.A.X}}" y="{{.A.Y}}" width="{{.A.W}}" height="{{.A.H}}"><title>{{.A.Title}}</title></rect>
<rect class="b" x="{{.B.X}}" y="{{.B.Y}}" width="{{.B.W}}" height="{{.B.H}}"><title>{{.B.Title}}</title></rect>
<text x="{{.LabelX}}" y="{{$.Base}}" dy="16" text-anchor="middle">{{.Label}}</text>
{{end}}</svg>{{end}}`
